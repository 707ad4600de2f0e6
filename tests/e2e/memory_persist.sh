#!/bin/bash
# Memory across processes: what one `luagent run` saves (memory.set, and
# the model's tool memory.save through tools.call) the next one finds with
# memory.search; the tools are listed; config caps and errors; concurrent
# writers from two processes.
. "$(dirname "$0")/lib/common.sh"

cat > "$WS/save.lua" <<'LUA'
memory.set("deploy-day", "Deploys happen on Tuesday at 10:00")
memory.set("stack", { lang = "C", db = "SQLite" }, "project")
local r = tools.call("memory.save", { key = "owner", value = "Ida runs the deploy pipeline" })
print("saved " .. r.key .. " in '" .. r.namespace .. "' replaced=" .. tostring(r.replaced))
LUA
expect_rc 0 "$LUAGENT" run save.lua && out_has "saved owner in '' replaced=false" && pass "save in process 1"
[ -f "$WS/.luagent/state.db" ] && pass "state.db in the workspace" || fail "no .luagent/state.db"

cat > "$WS/find.lua" <<'LUA'
for _, r in ipairs(memory.search("when are deploys?", 5)) do print("hit " .. r.key .. ": " .. r.value) end
local t = tools.call("memory.search", { query = "who owns the pipeline" })
print("tool count " .. t.count .. " first " .. t.results[1].key)
print("stack db " .. memory.get("stack", "project").db)
print("absent " .. tostring(memory.get("stack")))
LUA
expect_rc 0 "$LUAGENT" run find.lua && out_has "hit deploy-day: Deploys happen on Tuesday at 10:00" &&
  out_has "hit owner: Ida runs the deploy pipeline" && out_has "tool count 1 first owner" &&
  out_has "stack db SQLite" && out_has "absent nil" && pass "search in process 2 finds both"
# The best match comes first.
head -1 "$WS/.out" | grep -q "hit deploy-day" && pass "ranked" || fail "first hit: $(head -1 "$WS/.out")"

expect_rc 0 "$LUAGENT" tools list && out_has "memory.save" && out_has "memory.search" && pass "tools listed"
grep -E '^memory\.save +low ' "$WS/.out" >/dev/null && grep -E '^memory\.search +read ' "$WS/.out" >/dev/null &&
  pass "impacts low and read" || fail "impacts: $(grep memory "$WS/.out")"

# Hostile query text is never an FTS5 error.
cat > "$WS/hostile.lua" <<'LUA'
local n = 0
for _, q in ipairs({ '"a" OR', "NEAR(", "*", '"', "deploy*", "AND", "col:deploy", "\u{1F642}", "" }) do
  n = n + #memory.search(q)
  n = n + tools.call("memory.search", { query = q ~= "" and q or " " }).count
end
print("hostile ok " .. n)
LUA
expect_rc 0 "$LUAGENT" run hostile.lua && out_has "hostile ok" && pass "hostile queries"

# Config: a small cap and a default namespace.
cat > "$WS/luagent.lua" <<'LUA'
return {
  memory = { max_value_bytes = 16, namespace = "small" },
}
LUA
cat > "$WS/cap.lua" <<'LUA'
memory.set("ok", "sixteen bytes!!!")
print("in small: " .. memory.get("ok") .. ", default has it: " .. tostring(memory.get("ok", "") ~= nil))
memory.set("big", "seventeen bytes!!")
LUA
expect_rc 1 "$LUAGENT" run cap.lua && out_has "in small: sixteen bytes!!!, default has it: false" &&
  err_has "cap.lua:3:" && err_has "over the limit of 16" && err_has "[too_large]" && pass "configured cap and namespace"
printf 'return {\n  memory = {\n    limit = 5 },\n}\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" run find.lua && err_has "luagent.lua:3: key 'memory.limit': unknown key" && pass "bad memory config"
rm -f "$WS/luagent.lua"

# Two processes writing at once: nothing lost (WAL + busy timeout).
cat > "$WS/writer.lua" <<'LUA'
for i = 1, 150 do memory.set(args.who .. i, "entry " .. i .. " from " .. args.who, "conc") end
LUA
(cd "$WS" && "$LUAGENT" run writer.lua --arg who=a >"$WS/.wa" 2>&1) & pa=$!
(cd "$WS" && "$LUAGENT" run writer.lua --arg who=b >"$WS/.wb" 2>&1) & pb=$!
wait $pa; ra=$?
wait $pb; rb=$?
[ $ra = 0 ] && [ $rb = 0 ] && pass "concurrent writers exit 0" || fail "writers: $ra $rb $(cat "$WS/.wa" "$WS/.wb")"
echo 'print("count " .. memory.count("conc") .. " hits " .. #memory.search("entry", 100, "conc"))' > "$WS/count.lua"
expect_rc 0 "$LUAGENT" run count.lua && out_has "count 300 hits 100" && pass "all 300 concurrent writes kept"

finish
