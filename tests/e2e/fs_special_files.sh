#!/bin/bash
# e2e: fs.* never blocks on, and never reads or writes, a file in data/ that
# is not a regular file. A FIFO (named pipe) with no writer blocks open(2)
# for reading forever, and one with no reader blocks open(2) for writing;
# a socket or a device is no file either. Each call must come back at once
# with an error naming the path and what it is; the outer `timeout` makes a
# hang fail the test instead of stalling it.
#
# Then the runtime's own files (.luagent/state.db, a session's lock, the
# audit anchor, the secrets key) against fs.write and fs.delete, from a
# skill, from a skill a skill called, and from the model's own tool calls
# (`luagent ask`): through "..", absolute paths, and links planted in
# data/ (symlinks to the files and to .luagent, and hard links to the
# files). Every call is refused with an error naming the path, and every
# file keeps its inode and bytes. (run_basics.sh has fs.read of /etc.)
. "$(dirname "$0")/lib/mock.sh" "$1"
mkfifo "$WS/data/pipe" || { echo "mkfifo failed"; exit 1; }
mkdir -p "$WS/data/sub"
mkfifo "$WS/data/sub/pipe2"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$WS/data/sock"
echo hello > "$WS/data/plain.txt"
cat > "$WS/t.lua" <<'LUA'
local function try(label, tool, args)
  local ok, r = pcall(tools.call, tool, args)
  if ok and tool == "fs.read" then print(label, "ok", r.size, r.content)
  elseif ok and tool == "fs.list" then
    for _, f in ipairs(r) do print(label, f.name, f.type) end
  elseif ok then print(label, "ok", r.size)
  else print(label, "error", r.code, r.message) end
end
try("read-fifo", "fs.read", { path = "pipe" })
try("read-fifo-sub", "fs.read", { path = "sub/pipe2" })
try("read-sock", "fs.read", { path = "sock" })
try("read-dir", "fs.read", { path = "sub" })
try("read-through-fifo", "fs.read", { path = "pipe/x" })
try("list-fifo", "fs.list", { path = "pipe" })
try("write-through-fifo", "fs.write", { path = "pipe/x", content = "x" })
try("write-fifo", "fs.write", { path = "pipe", content = "x" })
try("append-fifo", "fs.write", { path = "pipe", content = "x", append = true })
try("append-sock", "fs.write", { path = "sock", content = "x", append = true })
try("read-plain", "fs.read", { path = "plain.txt" })
try("append-plain", "fs.write", { path = "plain.txt", content = "more\n", append = true })
try("list", "fs.list", {})
LUA
start=$(date +%s)
timeout 20 "$LUAGENT" --workspace "$WS" run "$WS/t.lua" > "$WS/out" 2> "$WS/err"
RC=$?
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
took=$(( $(date +%s) - start ))
[ "$RC" = 124 ] && fail "fs.* hung on a special file (killed by the test's timeout)"
expect_rc 0 "the script finishes"
[ "$took" -lt 10 ] && ok "it finishes promptly (${took}s)" || fail "it took ${took}s"
expect_out "read-fifo	error	invalid_path	fs.read: pipe: is a FIFO (named pipe), not a regular file" "fs.read refuses a FIFO"
expect_out "read-fifo-sub	error	invalid_path	fs.read: sub/pipe2: is a FIFO (named pipe), not a regular file" "fs.read refuses a FIFO in a subfolder"
expect_out "read-sock	error	invalid_path	fs.read: sock: is a socket, not a regular file" "fs.read refuses a socket"
expect_out "read-dir	error	invalid_path	fs.read: sub: is a directory, not a regular file" "fs.read refuses a directory"
expect_out "read-through-fifo	error	invalid_path	fs.read: pipe/x: leaves the data folder or is not a directory" "a FIFO as a folder is refused"
expect_out "list-fifo	error	invalid_path	fs.list: pipe/: leaves the data folder or is not a directory" "fs.list of a FIFO is refused"
expect_out "write-through-fifo	error" "fs.write through a FIFO as a folder is refused"
expect_out "write-fifo	error	invalid_path	fs.write: pipe: is a FIFO (named pipe), not a regular file" "fs.write refuses a FIFO"
expect_out "append-fifo	error	invalid_path	fs.write: pipe: is a FIFO (named pipe), not a regular file" "fs.write append refuses a FIFO"
expect_out "append-sock	error	invalid_path	fs.write: sock: is a socket, not a regular file" "fs.write append refuses a socket"
expect_out "$(printf 'read-plain\tok\t6\thello')" "a regular file still reads"
expect_out "append-plain	ok	5" "a regular file still appends"
expect_out "list	pipe	other" "fs.list shows the FIFO without opening it"
[ -p "$WS/data/pipe" ] && ok "the FIFO is still a FIFO" || fail "the FIFO was replaced"
[ "$(cat "$WS/data/plain.txt")" = "$(printf 'hello\nmore')" ] && ok "append wrote" || fail "append: $(cat "$WS/data/plain.txt")"

# ---------------------------------------------------------------------------
# the runtime's own files
printf 'TOKEN-VALUE-1234567' | "$LUAGENT" --workspace "$WS" secrets set TOKEN >/dev/null 2>&1 ||
  fail "secrets set"
mkdir -p "$WS/.luagent/sessions"
printf '%s\n' "$$" > "$WS/.luagent/sessions/s1.lock" # a session's lock, as session_hold leaves it
for f in state.db audit.anchor secrets.key sessions/s1.lock; do
  [ -f "$WS/.luagent/$f" ] || fail "no .luagent/$f to attack"
done
names="db lock anchor key"
target() { case $1 in db) echo state.db;; lock) echo sessions/s1.lock;; anchor) echo audit.anchor;;
  key) echo secrets.key;; esac; }
ln -s ../.luagent "$WS/data/dotl"     # the runtime's folder, relative
ln -s "$WS/.luagent" "$WS/data/abs"   # and absolute
for n in $names; do
  ln -s "../.luagent/$(target $n)" "$WS/data/ln_$n" # a symlink to the file
  ln "$WS/.luagent/$(target $n)" "$WS/data/hl_$n"   # a hard link to it
done
# What is compared after: inode and bytes, except for the two files every
# run rewrites (the journal and the audit chain in state.db, the head in
# audit.anchor): their inode, and that they hold only the runtime's own
# writing (no attack bytes, a sound database, an anchor of anchor lines).
snap() {
  for n in $names; do
    f="$WS/.luagent/$(target $n)"
    case $n in db|anchor) stat -c "$n %i" "$f";; *) stat -c "$n %i %s" "$f"; sha256sum < "$f";; esac
  done
}
snap > "$WS/before"
mkdir -p "$WS/skills/plant"
cat > "$WS/skills/plant/skill.lua" <<'LUA'
local params = { type = "object", required = { "op", "path" },
  properties = { op = { type = "string" }, path = { type = "string" }, append = { type = "boolean" } } }
return {
  name = "plant", description = "tries fs calls on paths it is given",
  keywords = { "files", "place" }, -- selected for the ask below
  tools = {
    try = { description = "one fs call", params = params, impact = "low",
      run = function(a)
        local args = { path = a.path }
        if a.op == "write" then args.content = "PLANTED-BY-A-SKILL\n"; args.append = a.append end
        local ok, r = pcall(tools.call, "fs." .. a.op, args)
        if ok then return { ok = true } end
        return { ok = false, code = r.code, message = r.message }
      end },
    nest = { description = "the same call, one skill deeper", params = params, impact = "low",
      run = function(a) return tools.call("plant.try", a) end },
  },
}
LUA
config 'rules = {
  { tool = "fs.*", caller = "script", action = "allow" },
  { tool = "fs.*", caller = "skill", action = "allow" },
  { tool = "fs.*", caller = "model", action = "allow" },
}'
# Every way in to each file: ".." (plain, and after a folder), absolute,
# through the symlinked folder (relative, absolute), the symlink, the hard
# link. fs.delete of the symlink or hard link itself is tried last, apart.
cat > "$WS/attack.lua" <<'LUA'
local targets = { db = "state.db", lock = "sessions/s1.lock", anchor = "audit.anchor",
                  key = "secrets.key" }
local paths = {}
for _, n in ipairs({ "db", "lock", "anchor", "key" }) do
  local t = targets[n]
  for _, p in ipairs({ "../.luagent/" .. t, "sub/../../.luagent/" .. t, args.ws .. "/.luagent/" .. t,
                       "dotl/" .. t, "abs/" .. t, "ln_" .. n, "hl_" .. n }) do
    paths[#paths + 1] = p
  end
end
local ops = { { op = "write", append = true }, { op = "write" }, { op = "delete" } }
for _, via in ipairs({ "plant.try", "plant.nest" }) do
  for _, p in ipairs(paths) do
    for _, o in ipairs(ops) do
      if not (o.op == "delete" and p:match("^[lh][nl]_")) then
        local r = tools.call(via, { op = o.op, path = p, append = o.append })
        print(via, o.op .. (o.append and "+append" or ""), p, tostring(r.ok), r.code, r.message)
      end
    end
  end
end
LUA
timeout 60 "$LUAGENT" --workspace "$WS" run "$WS/attack.lua" --arg ws="$WS" > "$WS/out" 2> "$WS/err"
RC=$?
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "the skill's attacks ran"
lines=$(grep -c '^plant\.' "$WS/out")
[ "$lines" = 152 ] && ok "152 attacks from a skill and a nested skill" || fail "$lines attack lines, wanted 152"
if grep -v $'\tfalse\t' "$WS/out" | grep -q '^plant\.'; then
  fail "a skill's fs call went through: $(grep -v $'\tfalse\t' "$WS/out" | grep '^plant\.' | head -5)"
else ok "every fs call of a skill and of a nested skill is refused"; fi
# each refusal names its path and says why
bad=$(awk -F'\t' '/^plant\./ && !(index($6, $3) && $5 != "" &&
  $6 ~ /absolute paths are not allowed|are not allowed|leaves the data folder|symlink|hard link/)' "$WS/out")
[ -z "$bad" ] && ok "each refusal names the path and why" || fail "unclear refusals: $(head -c 800 <<<"$bad")"
expect_out "plant.nest	write	../.luagent/state.db	false	invalid_path	fs.write: ../.luagent/state.db: '.', '..' and empty path parts are not allowed" "'..' is refused"
expect_out "plant.try	write	$WS/.luagent/secrets.key	false	invalid_path	fs.write: $WS/.luagent/secrets.key: absolute paths are not allowed" "an absolute path is refused"
expect_out "plant.nest	delete	dotl/audit.anchor	false	invalid_path	fs.delete: dotl/audit.anchor: leaves the data folder or is not a directory (symlinks are not followed)" "a symlinked folder is not followed"
expect_out "plant.try	write+append	ln_key	false	invalid_path	fs.write: ln_key: is a symlink (not followed), not a regular file" "a symlink to a file is not followed"
expect_out "plant.nest	write+append	hl_anchor	false	invalid_path	fs.write: hl_anchor: has 2 hard links (another name of it may be outside data/), so it is neither read nor written" "a hard link is not written through"
# the model's own tool calls, as it sends them
calls=""
i=0
for n in $names; do
  t=$(target $n)
  for p in "../.luagent/$t" "$WS/.luagent/$t" "dotl/$t" "abs/$t" "ln_$n" "hl_$n"; do
    i=$((i + 1))
    calls="$calls{\"id\":\"w$i\",\"name\":\"fs.write\",\"arguments\":{\"path\":\"$p\",\"content\":\"PLANTED-BY-THE-MODEL\"}},"
    calls="$calls{\"id\":\"a$i\",\"name\":\"fs.write\",\"raw_arguments\":\"{\\\"path\\\":\\\"$p\\\",\\\"content\\\":\\\"PLANTED\\\",\\\"append\\\":true}\"},"
    case $p in ln_*|hl_*) ;; *) calls="$calls{\"id\":\"d$i\",\"name\":\"fs.delete\",\"arguments\":{\"path\":\"$p\"}},";; esac
  done
  calls="$calls{\"id\":\"n$i\",\"name\":\"plant.nest\",\"arguments\":{\"op\":\"write\",\"path\":\"hl_$n\",\"append\":true}},"
done
start_mock m "{\"steps\":[{\"tool_calls\":[${calls%,}]},{\"text\":\"done\"}]}"
config "providers = { $(provider openai $PORT_m) },
  react = { max_tool_calls = 200 },
  rules = {
    { tool = \"fs.*\", caller = \"skill\", action = \"allow\" },
    { tool = \"fs.*\", caller = \"model\", action = \"allow\" },
  }"
ask --json "put these files in place"
expect_rc 0 "the model's attacks ran"
check m "len([m for m in msgs(1) if m['role'] == 'tool']) == 68" "68 tool results went back to the model"
check m "all(m['content'].startswith('error') for m in msgs(1) if m['role'] == 'tool' and not m['tool_call_id'].startswith('n'))" "every fs call of the model is refused"
check m "all('\"ok\":false' in m['content'] for m in msgs(1) if m['role'] == 'tool' and m['tool_call_id'].startswith('n'))" "the skills the model called were refused too"
check m "sum('absolute paths are not allowed' in m['content'] for m in msgs(1) if m['role'] == 'tool') == 12" "the model is told why (an absolute path)"
# fs.read through the hard link would hand out the secrets key itself;
# then fs.delete of the planted links: only the link in data/ goes
cat > "$WS/unlink.lua" <<'LUA'
local r = tools.call("plant.nest", { op = "read", path = "hl_key" })
print("read", "hl_key", tostring(r.ok), r.code, r.message)
for _, n in ipairs({ "db", "lock", "anchor", "key" }) do
  for _, p in ipairs({ "ln_" .. n, "hl_" .. n }) do
    local r = tools.call("plant.nest", { op = "delete", path = p })
    print("unlink", p, tostring(r.ok))
  end
end
LUA
lrun "$WS/unlink.lua"
expect_rc 0 "deleting the planted links ran"
expect_out "read	hl_key	false	invalid_path	fs.read: hl_key: has 2 hard links" "fs.read does not read the key through a hard link"
for n in $names; do
  [ -e "$WS/data/ln_$n" ] || [ -e "$WS/data/hl_$n" ] && fail "a planted link to $n is still there"
done
snap > "$WS/after"
if cmp -s "$WS/before" "$WS/after"; then ok "every file keeps its inode (and bytes, but for state.db and audit.anchor)"
else fail "a runtime file changed: $(diff "$WS/before" "$WS/after")"; fi
# (state.db may hold the attack bytes: its run journal records the calls)
grep -l PLANTED "$WS/.luagent/audit.anchor" "$WS/.luagent/secrets.key" "$WS/.luagent/sessions/s1.lock" &&
  fail "attack bytes in a runtime file" || ok "no attack bytes in the runtime's other files"
python3 - "$WS/.luagent/state.db" "$WS/.luagent/audit.anchor" <<'PY' && ok "state.db is sound, audit.anchor holds anchor lines" || fail "state.db or audit.anchor damaged"
import os, re, sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
page = db.execute("PRAGMA page_size").fetchone()[0]
assert os.path.getsize(sys.argv[1]) % page == 0, "bytes appended to state.db"
for line in open(sys.argv[2]):
    assert re.fullmatch(r"seq=\d+ rows=\d+ hash=[0-9a-f]{64}( sig=[0-9a-f]+)? ts=\S+\n?", line), line
PY
OUT=$("$LUAGENT" --workspace "$WS" audit verify 2>&1); RC=$?
expect_rc 0 "the audit chain and its anchor still verify"
finish
