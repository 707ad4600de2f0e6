# Read-only tools of one round run in parallel threads, everything else in
# order after them, and the transcript the model sees next is identical to
# a serial run (react.parallel_tools = false).
. "$(dirname "$0")/lib/mock.sh" "$1"
printf 'one' > "$WS/data/a.txt"; printf 'two' > "$WS/data/b.txt"; mkdir -p "$WS/data/sub"; printf 'x' > "$WS/data/sub/c.txt"
FIX='{"steps":[{"text":"Reading all.","tool_calls":[
  {"id":"c1","name":"fs.read","arguments":{"path":"a.txt"}},
  {"id":"c2","name":"fs.write","arguments":{"path":"log.txt","content":"w1"}},
  {"id":"c3","name":"fs.read","arguments":{"path":"b.txt"}},
  {"id":"c4","name":"fs.list","arguments":{"path":"sub"}},
  {"id":"c5","name":"fs.read","arguments":{"path":"nope.txt"}},
  {"id":"c6","name":"fs.write","arguments":{"path":"log.txt","content":"w2","append":true}}]},
 {"text":"All read."}]}'
for kind in openai anthropic; do
  for par in true false; do
    rm -f "$WS/data/log.txt"
    start_mock $par "$FIX"
    eval port=\$PORT_$par
    config "providers = { $(provider $kind $port) }, react = { parallel_tools = $par }"
    ask --json "read everything"
    expect_rc 0 "$kind parallel=$par: answered"
    n=$(printf '%s\n' "$OUT" | grep '"type":"tool_result"' | grep -c '"parallel":true')
    if [ $par = true ]; then want=4; else want=0; fi
    [ "$n" = "$want" ] && ok "$kind parallel=$par: $want results from worker threads" || fail "$kind parallel=$par: $n parallel results"
    order=$(printf '%s\n' "$OUT" | grep '"type":"tool_result"' | sed 's/.*"id":"\(c[0-9]\)".*/\1/' | tr -d '\n')
    [ "$order" = "c1c2c3c4c5c6" ] && ok "$kind parallel=$par: results in the order asked" || fail "$kind: order $order"
    [ "$(cat "$WS/data/log.txt")" = "w1w2" ] && ok "$kind parallel=$par: writes ran in order" || fail "$kind: writes out of order"
    stop_mocks
  done
  python3 - "$WS/true.log" "$WS/false.log" <<'PY' && ok "$kind: transcript identical to the serial run" || { FAILS=$((FAILS+1)); echo "FAIL $kind: transcripts differ"; }
import json, sys, re
def second(path):
    reqs = [json.loads(l) for l in open(path)]
    return json.dumps(reqs[1]["body"]["messages"], sort_keys=True)
a, b = second(sys.argv[1]), second(sys.argv[2])
if a != b:
    print(a); print(b)
sys.exit(0 if a == b else 1)
PY
done
finish
