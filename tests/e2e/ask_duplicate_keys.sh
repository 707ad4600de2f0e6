# Tool-call arguments with a repeated key (issue 10, item 1): the model sends
# {"path":"secrets/k.txt","path":"ok.txt"}. The old parser let the schema,
# the rules and the tool see the first path while a before_tool hook (which
# forbids secrets/) saw the last one, so the secret was read. Now the call
# never runs: the model gets an invalid_args result naming the key, in both
# wire formats, streamed and not. A well-formed call next to them keeps
# its exact values: an integer beyond 2^53 and a \u0000 inside a string
# (the old parser cut the string and printed 9.00719925474099e+15).
. "$(dirname "$0")/lib/mock.sh" "$1"
mkdir -p "$WS/data/secrets"
printf 'TOP-SECRET-4711' > "$WS/data/secrets/k.txt"
printf 'harmless' > "$WS/data/ok.txt"
cat > "$WS/hooks.lua" <<'LUA'
return {
  before_tool = function(call)
    if call.tool == "fs.read" and tostring(call.args.path):find("^secrets/") then
      return "deny", "secrets are off limits"
    end
  end,
}
LUA
FIX='{"steps":[
 {"text":"","tool_calls":[
   {"id":"c1","name":"fs.read","raw_arguments":"{\"path\":\"secrets/k.txt\",\"path\":\"ok.txt\"}"},
   {"id":"c2","name":"fs.read","raw_arguments":"{\"path\":\"ok.txt\",\"x\":{\"a\":1,\"a\":2}}"},
   {"id":"c3","name":"fs.read","raw_arguments":"{\"path\":\"ok.txt\"} trailing"},
   {"id":"c4","name":"echo","raw_arguments":"{\"n\":9007199254740993,\"s\":\"a\\u0000b\",\"f\":0.1}"}]},
 {"text":"I could not read it."}]}'
for kind in openai anthropic; do
  for stream in true false; do
    tag="$kind stream=$stream"
    start_mock m "$FIX"
    config "providers = { $(provider $kind $PORT_m ", stream = $stream") }"
    ask "read the file"
    expect_rc 0 "$tag: the run goes on"
    expect_out "I could not read it." "$tag: the model answered after the error"
    if [ $kind = openai ]; then
      R="[m['content'] for m in msgs(1) if m.get('role') == 'tool']"
    else
      R="[b['content'] for m in msgs(1) if m['role'] == 'user' and isinstance(m['content'], list) for b in m['content'] if b.get('type') == 'tool_result']"
    fi
    check m "len($R) == 4 and all(c.startswith('error (invalid_args)') for c in $R[:3])" "$tag: three invalid_args results"
    check m "json.loads($R[3]) == {'n': 9007199254740993, 's': 'a\x00b', 'f': 0.1}" "$tag: a big integer and \\u0000 reach the tool and come back exact"
    check m "'invalid JSON at byte 24: duplicate key \"path\"' in $R[0]" "$tag: the duplicate key and its offset are named"
    check m "'duplicate key \"a\"' in $R[1]" "$tag: a duplicate in a nested object is refused too"
    check m "'unexpected content after the value' in $R[2]" "$tag: trailing content is refused"
    check m "not any('TOP-SECRET' in str(r['body']) for r in reqs)" "$tag: the secret never reached the model"
    if [ $kind = anthropic ]; then
      check m "[b['input'] for b in msgs(1)[1]['content'] if b.get('type') == 'tool_use'] == [{}, {}, {}, {'n': 9007199254740993, 's': 'a\x00b', 'f': 0.1}]" "$tag: refused calls echoed as empty inputs, the good one exact"
    fi
    stop_mocks
  done
done

# the operator's JSON on the command line is held to the same rule
cd "$WS"
RC=0; OUT=$("$LUAGENT" --workspace "$WS" skills call fs.read '{"path":"secrets/k.txt","path":"ok.txt"}' 2>&1) || RC=$?; ERR=$OUT
expect_rc 2 "skills call: duplicate key refused"
expect_out 'invalid JSON at byte 24: duplicate key "path"' "skills call: the key is named"
RC=0; OUT=$("$LUAGENT" --workspace "$WS" emit deploy '{"a":1,"a":2}' 2>&1) || RC=$?; ERR=$OUT
expect_rc 2 "emit: duplicate key refused"
expect_out 'event payload is not valid JSON: invalid JSON at byte 7: duplicate key "a"' "emit: the key is named"
finish
