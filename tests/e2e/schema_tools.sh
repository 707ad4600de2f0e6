# Tool parameters are checked against JSON Schema for real, whoever calls:
# a skill tool declaring pattern "^[a-z]+$" refuses "../../etc" with
# invalid_args from a Lua script, from a nested skill call, from the
# operator (skills call) and from the model's raw tool call, and denies it
# when a hook rewrites the arguments to it; const compares
# numbers exactly; and `skills check` refuses a misspelled keyword, a
# pattern luagent cannot run and a remote $ref, naming file:line, the tool,
# the keyword and where it sits.
. "$(dirname "$0")/lib/mock.sh" "$1"

mkdir -p "$WS/skills/files"
cat > "$WS/skills/files/skill.lua" <<'LUA'
return {
  name = "files",
  description = "Opens files by plain name",
  tools = {
    open = {
      description = "Open a file by name",
      params = { type = "object", required = { "path" },
                 properties = { path = { type = "string", pattern = "^[a-z]+$" } } },
      impact = "read",
      run = function(args) return { opened = args.path } end,
    },
    proxy = {
      description = "Open through another tool",
      params = { type = "object", properties = { p = { type = "string" } } },
      impact = "read",
      run = function(args) return tools.call("files.open", { path = args.p }) end,
    },
    pick = {
      description = "Needs exactly 2^53",
      params = { type = "object", properties = { n = { const = 9007199254740992 } } },
      impact = "read",
      run = function(args) return { n = args.n } end,
    },
  },
}
LUA

# a hook that rewrites the arguments gets them validated again, pattern included
cat > "$WS/hooks.lua" <<'LUA'
return {
  before_tool = function(call)
    if call.tool == "files.open" and call.args.path == "hookme" then
      return nil, nil, { path = "../../etc" }
    end
  end,
}
LUA

cat > "$WS/attack.lua" <<'LUA'
local ok, err = pcall(tools.call, "files.open", { path = "../../etc" })
print("direct", ok, type(err) == "table" and err.code, type(err) == "table" and err.message)
ok, err = pcall(tools.call, "files.proxy", { p = "../../etc" })
print("nested", ok, type(err) == "table" and err.code, type(err) == "table" and err.message)
ok, err = pcall(tools.call, "files.pick", { n = 9007199254740991 })
print("const", ok, type(err) == "table" and err.code, type(err) == "table" and err.message)
ok, err = pcall(tools.call, "files.open", { path = "hookme" })
print("hook", ok, type(err) == "table" and err.code, type(err) == "table" and err.message)
local r = tools.call("files.open", { path = "etc" })
print("good", r.opened)
LUA
lrun "$WS/attack.lua"
expect_rc 0 "the script ran"
expect_out 'direct	false	invalid_args	files.open: args.path: does not match pattern "^[a-z]+$"' "a Lua call with ../../etc is refused, naming path and pattern"
expect_out 'nested	false	invalid_args' "a nested skill call with ../../etc is refused"
expect_out 'args.path: does not match pattern' "the nested refusal names the pattern"
expect_out 'const	false	invalid_args	files.pick: args.n: must equal the constant value' "const 2^53 refuses 2^53-1 (exact numbers)"
expect_out 'hook	false	denied	' "arguments rewritten by a hook are validated again"
expect_out 'files.open: args rewritten by hooks.lua are invalid: args.path: does not match pattern "^[a-z]+$"' "the hook refusal names the pattern"
expect_out 'good	etc' "a matching name still runs"

timeout 60 "$LUAGENT" --workspace "$WS" skills call files.open '{"path": "../../etc"}' > "$WS/out" 2> "$WS/err"
RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 1 "skills call with ../../etc fails"
expect_err 'does not match pattern "^[a-z]+$"' "the operator's call is refused too"

# -- the model's raw tool call
start_mock m '{"steps":[{"text":"","tool_calls":[{"id":"c1","name":"files.open","arguments":{"path":"../../etc"}}]},
 {"text":"refused."}]}'
config "providers = { $(provider anthropic $PORT_m) }"
ask "open the file ../../etc"  # a request that selects the files skill
expect_rc 0 "the run goes on after the refusal"
check m "msgs(1)[2]['content'][0]['content'].startswith('error (invalid_args)')" "the model sees invalid_args"
check m "'does not match pattern' in msgs(1)[2]['content'][0]['content']" "the model is told which keyword failed"
stop_mocks

# -- skills check: schemas luagent cannot enforce are refused at load
W2="$WS/ws2"
mkdir -p "$W2/skills/typo" "$W2/skills/regex" "$W2/skills/remote"
cat > "$W2/skills/typo/skill.lua" <<'LUA'
return {
  name = "typo",
  description = "x",
  tools = {
    t = {
      description = "t",
      params = { type = "object",
                 properties = { a = { type = "string" } },
                 requried = { "a" } },
      run = function() end,
    },
  },
}
LUA
cat > "$W2/skills/regex/skill.lua" <<'LUA'
return {
  name = "regex",
  description = "x",
  tools = {
    t = {
      description = "t",
      params = { type = "object", properties = {
        a = { type = "string",
              pattern = "^(?!\\.\\.).*$" } } },
      run = function() end,
    },
  },
}
LUA
cat > "$W2/skills/remote/skill.lua" <<'LUA'
return {
  name = "remote",
  description = "x",
  tools = {
    t = {
      description = "t",
      params = { type = "object", properties = { a = { ["$ref"] = "https://example.com/s.json" } } },
      run = function() end,
    },
  },
}
LUA
timeout 60 "$LUAGENT" --workspace "$W2" skills check > "$WS/out" 2> "$WS/err"
RC=$?; OUT="$(cat "$WS/out") $(cat "$WS/err")"
expect_rc 1 "skills check fails"
expect_out "skills/typo/skill.lua:9: tool 't': typo.t params: unknown keyword 'requried' at #" "misspelled keyword: file:line, tool, keyword, pointer"
expect_out "skills/regex/skill.lua:9: tool 't': regex.t params: 'pattern' \"^(?!\\.\\.).*\$\" cannot be used: lookahead and lookbehind are not supported at #/properties/a" "an unsupported pattern is refused at load"
expect_out "skills/remote/skill.lua:7: tool 't': remote.t params: remote '\$ref' \"https://example.com/s.json\" is not supported (only refs inside the schema) at #/properties/a" "a remote \$ref is refused at load"
timeout 60 "$LUAGENT" --workspace "$W2" skills call typo.t '{}' > "$WS/out" 2> "$WS/err"
RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 1 "a tool with a refused schema is not registered"
expect_err "unknown tool" "calling it says unknown tool"
finish
