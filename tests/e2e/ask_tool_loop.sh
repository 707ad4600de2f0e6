# A multi-step tool loop through the real binary, in both wire formats,
# streamed and not: the model reads a file, writes another, then answers.
# Checks the answer, the exit code, and the exact requests the mock got.
. "$(dirname "$0")/lib/mock.sh" "$1"
printf 'alpha beta' > "$WS/data/in.txt"
FIX='{"steps":[
 {"text":"Let me read it.","chunk":3,"usage":{"input":40,"output":8},
  "tool_calls":[{"id":"call_a","name":"fs.read","arguments":{"path":"in.txt"}}]},
 {"text":"","usage":{"input":60,"output":9},
  "tool_calls":[{"id":"call_b","name":"fs.write","arguments":{"path":"out.txt","content":"ALPHA BETA"}}]},
 {"text":"Done: the file said alpha beta.","chunk":4,"usage":{"input":80,"output":10}}]}'
for kind in openai anthropic; do
  for stream in true false; do
    tag="$kind stream=$stream"
    rm -f "$WS/data/out.txt"
    start_mock m "$FIX"
    export MOCK_KEY=sk-test-123
    config "providers = { $(provider $kind $PORT_m ", stream = $stream, api_key_env = \"MOCK_KEY\"") }"
    ask "Uppercase in.txt into out.txt"
    expect_rc 0 "$tag: answered"
    expect_out "Let me read it." "$tag: first turn text streamed"
    expect_out "Done: the file said alpha beta." "$tag: final answer"
    expect_err "-> fs.read" "$tag: tool activity shown"
    [ "$(cat "$WS/data/out.txt" 2>/dev/null)" = "ALPHA BETA" ] && ok "$tag: fs.write ran" || fail "$tag: fs.write did not run"
    check m "len(reqs) == 3" "$tag: three model calls"
    check m "all(bool(r['body'].get('stream', False)) == ('$stream' == 'true') for r in reqs)" "$tag: stream flag"
    if [ $kind = openai ]; then
      check m "reqs[0]['path'] == '/v1/chat/completions' and reqs[0]['headers'].get('authorization') == 'Bearer sk-test-123'" "$tag: path and bearer key"
      check m "msgs(0)[0]['role'] == 'system' and msgs(0)[1] == {'role':'user','content':'Uppercase in.txt into out.txt'}" "$tag: system + user message"
      check m "[t['function']['name'] for t in reqs[0]['body']['tools']].count('fs__read') == 1 and reqs[0]['body']['tools'][0]['type'] == 'function'" "$tag: tools with wire names"
      check m "msgs(1)[2]['tool_calls'][0]['id'] == 'call_a' and msgs(1)[2]['tool_calls'][0]['function']['name'] == 'fs__read'" "$tag: assistant tool call echoed"
      check m "msgs(1)[3]['role'] == 'tool' and msgs(1)[3]['tool_call_id'] == 'call_a' and 'alpha beta' in msgs(1)[3]['content']" "$tag: tool result as role tool"
      if [ $stream = true ]; then check m "reqs[0]['body']['stream_options'] == {'include_usage': True}" "$tag: include_usage"; fi
    else
      check m "reqs[0]['path'] == '/v1/messages' and reqs[0]['headers'].get('x-api-key') == 'sk-test-123' and reqs[0]['headers'].get('anthropic-version') == '2023-06-01'" "$tag: path, x-api-key, version"
      check m "'luagent' in json.dumps(reqs[0]['body']['system']) and msgs(0)[0]['role'] == 'user' and reqs[0]['body']['max_tokens'] > 0" "$tag: top-level system, max_tokens"
      check m "any(t['name'] == 'fs__read' and 'input_schema' in t for t in reqs[0]['body']['tools'])" "$tag: tools with input_schema"
      check m "msgs(1)[1]['role'] == 'assistant' and msgs(1)[1]['content'][1] == {'type':'tool_use','id':'call_a','name':'fs__read','input':{'path':'in.txt'}}" "$tag: tool_use block echoed"
      check m "msgs(1)[2]['role'] == 'user' and msgs(1)[2]['content'][0]['type'] == 'tool_result' and msgs(1)[2]['content'][0]['tool_use_id'] == 'call_a' and 'alpha beta' in msgs(1)[2]['content'][0]['content']" "$tag: tool_result in a user message"
    fi
    stop_mocks
  done
done
# usage and tokens reach the journal
"$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py" > "$WS/runs.json"
python3 - "$WS/runs.json" <<'PY' && ok "four runs journaled as ok" || { FAILS=$((FAILS+1)); echo "FAIL runs journal"; cat "$WS/runs.json"; }
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
assert len(runs) == 4 and all(r["status"] == "ok" and r["tool_calls"] == 2 for r in runs), runs
PY
finish
