#!/bin/bash
# luagent skills check on a folder of broken skills: every problem is named
# with file and line, the exit status is 1, and the good skills still load
# (and their tools still run).
. "$(dirname "$0")/lib/common.sh"
S="$WS/skills"
mkdir -p "$S"/{good,good-md,bad-impact,bad-params,no-run,dup-a,dup-b,bad-yaml,syntax,not-table,bad-name,typo,runtime-err,no-desc,empty,side}

cat > "$S/good/skill.lua" <<'LUA'
return {
  name = "good",
  description = "Greets people by name",
  keywords = { "greet", "hello" },
  tools = {
    hello = {
      description = "Say hello",
      params = { type = "object", required = { "who" }, properties = { who = { type = "string" } } },
      impact = "read",
      run = function(args, call) return { text = "hello " .. args.who, caller = call.caller, skill = call.skill } end,
    },
    twice = {
      description = "Say hello twice, through tools.call",
      params = { type = "object", properties = { who = { type = "string" } } },
      impact = "read",
      run = function(args)
        local a = tools.call("good.hello", { who = args.who or "you" })
        return { a.text, a.text }
      end,
    },
  },
}
LUA
printf -- '---\nname: good\ndescription: ignored, skill.lua has one\nexamples: [say hi to Ada]\n---\nGreet warmly.\n' > "$S/good/SKILL.md"
printf -- '---\nname: good-md\ndescription: Instructions only\n---\nBe nice.\n' > "$S/good-md/SKILL.md"
cat > "$S/bad-impact/skill.lua" <<'LUA'
return {
  name = "bad-impact",
  description = "x",
  tools = {
    t = {
      description = "t",
      impact = "huge",
      run = function() end,
    },
  },
}
LUA
cat > "$S/bad-params/skill.lua" <<'LUA'
return {
  name = "bad-params",
  description = "x",
  tools = {
    t = {
      description = "t",
      params = { type = "string" },
      run = function() end,
    },
  },
}
LUA
cat > "$S/no-run/skill.lua" <<'LUA'
return {
  name = "no-run",
  description = "x",
  tools = {
    lazy = {
      description = "never runs",
    },
  },
}
LUA
printf 'return { name = "dup", description = "first" }\n' > "$S/dup-a/skill.lua"
printf '\nreturn { name = "dup", description = "second" }\n' > "$S/dup-b/skill.lua"
printf -- '---\nname: bad-yaml\ndescription: x\ntags: [a, b\n---\n' > "$S/bad-yaml/SKILL.md"
printf 'return {\n  name = "syntax",\n  description = "x"\n  tools = {}\n}\n' > "$S/syntax/skill.lua"
printf 'return 42\n' > "$S/not-table/skill.lua"
printf 'return {\n  name = "Bad Name",\n  description = "x" }\n' > "$S/bad-name/skill.lua"
printf 'return {\n  name = "typo",\n  descripton = "x",\n  description = "y" }\n' > "$S/typo/skill.lua"
printf 'local t = nil\nreturn { name = t.x }\n' > "$S/runtime-err/skill.lua"
printf -- '---\nname: no-desc\n---\nbody\n' > "$S/no-desc/SKILL.md"
printf 'tools.call("fs.write", { path = "loaded.txt", content = "side effect" })\nreturn { name = "side", description = "x" }\n' > "$S/side/skill.lua"

expect_rc 1 "$LUAGENT" skills check
for want in \
  "skills/bad-impact/skill.lua:7: tool 't': unknown impact 'huge'" \
  "skills/bad-params/skill.lua:7: tool 't': params must be an object schema" \
  "skills/no-run/skill.lua:5: tool 'lazy' has no run function" \
  "skills/dup-b/skill.lua:2: duplicate skill name 'dup' (already defined in skills/dup-a/skill.lua)" \
  "skills/bad-yaml/SKILL.md:5: front matter is not valid YAML" \
  "skills/syntax/skill.lua:4:" \
  "skills/not-table/skill.lua: skill.lua must return a table" \
  "skills/bad-name/skill.lua:2: skill name 'Bad Name' is not valid" \
  "skills/typo/skill.lua:3: unknown key 'descripton'" \
  "skills/runtime-err/skill.lua:2:" \
  "skills/no-desc/SKILL.md:2: the front matter needs a non-empty 'description'" \
  "skills/empty: no skill.lua or SKILL.md" \
  "skills/side/skill.lua:1: undefined global 'tools'" \
  "7 skill(s) loaded with 2 tool(s); 13 problem(s)"; do
  out_has "$want" && pass "check names: $want"
done
if grep -q "$WS" "$WS/.out"; then fail "host path in check output"; else pass "no host path in check output"; fi
[ -e "$WS/data/loaded.txt" ] && fail "loading a skill ran a tool" || pass "loading skills has no side effects"

expect_rc 1 "$LUAGENT" skills check --json
python3 - "$WS/.out" <<'PY' && pass "check --json" || fail "check --json: $(head -c 300 "$WS/.out")"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len([r for r in rows if not r.get("hint")]) == 13
assert all({"file", "line", "message", "fatal"} <= set(r) for r in rows)
hints = [r for r in rows if r.get("hint")]
assert hints and all(not r["fatal"] and "no examples" in r["message"] for r in hints)
PY

expect_rc 0 "$LUAGENT" skills list && out_has "good.hello,good.twice" && out_has "good-md" && out_has "typo" && out_has "dup " \
  && err_has "13 problem(s)" && pass "good skills still load"
expect_rc 0 "$LUAGENT" skills list --json
python3 - "$WS/.out" <<'PY' && pass "skill.lua + SKILL.md in one folder merge" || fail "merge: $(head -c 400 "$WS/.out")"
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))}
g = rows["good"]
assert g["source"] == "skills/good/skill.lua" and g["skill_md"] == "skills/good/SKILL.md", g
assert g["description"] == "Greets people by name" and g["prompt"] == "Greet warmly.\n", g
PY
expect_rc 0 "$LUAGENT" skills call good.hello '{"who": "Ada"}' && out_has '"text":	"hello Ada"' && out_has '"caller":	"operator"' \
  && out_has '"skill":	"good"' && pass "a good Lua tool runs next to broken skills"
expect_rc 0 "$LUAGENT" skills call good.twice '{"who": "Bo"}' && out_has '"hello Bo"' && pass "a Lua tool composes another through tools.call"
expect_rc 1 "$LUAGENT" skills call bad-impact.t && err_has "unknown tool" && pass "a broken tool is not registered"
expect_rc 0 "$LUAGENT" skills select "greet Ada" && out_has "good" && pass "selection over the loaded skills"
# The description limit counts characters, not bytes; a skill without
# examples gets a hint, which never fails the check.
rm -rf "$S" && mkdir -p "$S"/{zh,long,ok}
python3 - "$S" <<'PY'
import sys
s = sys.argv[1]
zh = "飞书日历：查看、创建和更新日程，" * 25   # 400 characters, 1,200 bytes
open(s + "/zh/SKILL.md", "w").write("---\nname: zh\ndescription: %s\nexamples: [看看明天的日程]\n---\n" % zh)
open(s + "/long/SKILL.md", "w").write("---\nname: long\ndescription: %s\nexamples: [x]\n---\n" % ("é" * 1025))
open(s + "/ok/SKILL.md", "w").write("---\nname: ok\ndescription: Fine skill without examples\n---\n")
PY
expect_rc 1 "$LUAGENT" skills check
out_has "skills/long/SKILL.md:3: description is 1025 characters; the Agent Skills limit is 1024" && pass "1,025 characters are over the limit"
if grep -q "skills/zh/SKILL.md.*description" "$WS/.out"; then fail "400 Chinese characters (1,200 bytes) flagged"; else pass "the limit counts characters, not bytes"; fi
out_has "skills/ok/SKILL.md:2: hint: skill 'ok' has no examples" && out_has "for 54% of MetaTool requests instead of 39%" && out_has "1 problem(s), 1 hint(s)" && pass "a skill without examples gets a hint"
rm -rf "$S/long"
expect_rc 0 "$LUAGENT" skills check && out_has "0 problem(s), 1 hint(s)" && pass "hints alone do not fail the check"
finish
