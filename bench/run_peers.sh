#!/bin/sh
# luagent's ReAct loop vs Node agent frameworks, all against ONE mock model
# server (tests/mock_llm.py) in the same run: the 10-turn task of
# bench/bench_react.c (9 streamed rounds of the model calling a trivial `echo`
# tool, then a streamed answer), served with "by_turn": true so every client
# gets the same answers.
#   luagent    bench_react pointed at the shared mock (in-process loop, plus its
#              raw libcurl client replaying luagent's requests: the floor)
#   openai     the official `openai` SDK with a hand-written tool loop
#   ai-sdk     Vercel AI SDK streamText + tools + stopWhen
#   langgraph  LangChain JS ChatOpenAI + LangGraph createReactAgent (streamed)
#   raw-node   fetch() replaying luagent's requests (the Node floor)
# Peer versions are pinned in bench/peers/package.json (+ package-lock.json);
# the first run installs them with `npm ci`. Node and npm missing, or the
# install failing: the peers are skipped with a message, luagent still runs.
# Usage: bench/run_peers.sh BUILD_DIR      (REPS=20 tasks per stack by default)
set -u
B=${1:-build}
REPS=${REPS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
[ -x "$B/luagent" ] && [ -x "$B/bench_react" ] || {
  echo "run_peers: $B/luagent and $B/bench_react are needed (cmake --build $B --target luagent bench_react)" >&2
  exit 1
}
T=$(mktemp -d /tmp/luagent_peers_XXXXXX)
MOCK=
cleanup() {
  bench_mock_stop
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The task of bench_react.c, answered by conversation turn.
bench_task "$T/fixture.json"
bench_mock run_peers "$T/fixture.json"
RES=$T/results
: >"$RES"
now_ns() { date +%s%N; }
HAVE_TIME=0
[ -x /usr/bin/time ] && HAVE_TIME=1

# measure NAME KIND COUNT CMD...: COUNT runs of CMD (after one untimed run
# that warms the page cache), each one's wall ms (and peak RSS KiB) to RES.
measure() {
  name=$1 kind=$2 count=$3
  shift 3
  "$@" >/dev/null 2>"$T/err" || { echo "run_peers: $name $kind failed: $(tail -3 "$T/err")" >&2; return 1; }
  k=0
  while [ $k -lt "$count" ]; do
    t0=$(now_ns)
    if [ $HAVE_TIME = 1 ]; then
      /usr/bin/time -f %M -o "$T/rss" "$@" >/dev/null 2>"$T/err"
    else
      "$@" >/dev/null 2>"$T/err"
    fi || { echo "run_peers: $name $kind failed: $(tail -3 "$T/err")" >&2; return 1; }
    t1=$(now_ns)
    us=$(((t1 - t0) / 1000))
    echo "$name ${kind}_ms ${us}e-3" >>"$RES"
    [ $HAVE_TIME = 1 ] && echo "$name ${kind}_rss $(tail -1 "$T/rss")" >>"$RES"
    k=$((k + 1))
  done
}

# --- luagent: the loop in process (bench_react, same mock), then processes
echo "luagent: bench_react against the shared mock ($REPS tasks)..."
BENCH_MOCK_PORT=$PORT BENCH_MOCK_LOG=$T/requests.jsonl LUAGENT_SOURCE_DIR=$ROOT \
  "$B/bench_react" "$B/luagent" "$REPS" >"$T/react.txt" 2>&1 || {
  cat "$T/react.txt"
  exit 1
}
sed 's/^/  /' "$T/react.txt"
awk '/^  loop  /{print "luagent turn_ms", $2}
     /raw client floor/{print "floor turn_ms", $4}
     /CPU in luagent/{print "luagent cpu_ms", $4}' "$T/react.txt" >>"$RES"
cp "$T/requests.jsonl" "$T/luagent_requests.jsonl" # its first 10 lines: one luagent task
mkdir -p "$T/ws"
measure luagent startup 5 "$B/luagent" --workspace "$T/ws" tools list
measure luagent once 3 env LUAGENT_PROVIDER=openai LUAGENT_MODEL=m LUAGENT_BASE_URL="$URL" \
  "$B/luagent" --workspace "$T/ws" ask --max-iterations 10 "Do the ten steps."

# --- the Node peers
PEERS="openai ai-sdk langgraph raw-node"
P=$ROOT/bench/peers
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "run_peers: node or npm not found: Node peers skipped" >&2
  PEERS=
elif [ ! -d "$P/node_modules" ]; then
  echo "peers: installing the pinned packages (npm ci --prefix bench/peers)..."
  npm ci --prefix "$P" --no-audit --no-fund >"$T/npm.log" 2>&1 || {
    echo "run_peers: npm ci failed, Node peers skipped: $(tail -3 "$T/npm.log")" >&2
    rm -rf "$P/node_modules"
    PEERS=
  }
fi
[ -n "$PEERS" ] && echo "peers: node $(node --version), $REPS tasks each (2 more first, as warm-up)..."
for s in $PEERS; do
  echo "  $s"
  RAW_LOG=$T/luagent_requests.jsonl node "$P/bench.mjs" "$s" "$URL" warm "$REPS" \
    >"$T/$s.json" 2>"$T/err" || { echo "run_peers: $s failed: $(tail -3 "$T/err")" >&2; continue; }
  python3 - "$s" "$T/$s.json" >>"$RES" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
for ms, cpu in zip(r["task_ms"], r["cpu_ms"]):
    print(sys.argv[1], "turn_ms", ms / 10)
    print(sys.argv[1], "cpu_ms", cpu / 10)
EOF
  export RAW_LOG=$T/luagent_requests.jsonl
  measure "$s" startup 5 node "$P/bench.mjs" "$s" "$URL" load
  measure "$s" once 3 node "$P/bench.mjs" "$s" "$URL" once
done

# --- the table
echo
python3 - "$RES" <<'EOF'
import statistics, sys
from collections import defaultdict
d = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    name, key, val = line.split()
    d[name][key].append(float(val))
def med(n, k):
    return statistics.median(d[n][k]) if n in d and d[n][k] else None
floor = med("floor", "turn_ms")
base = {k: med("luagent", k) for k in ("turn_ms", "cpu_ms", "startup_ms", "once_ms", "once_rss")}
base["over"] = base["turn_ms"] - floor
def cell(v, fmt):
    return "n/a" if v is None else fmt % v
def ratio(v, b):
    return "" if v is None or not b or b <= 0 else " (%.1fx)" % (v / b)
print("Same mock, same run; medians. Floor = bench_react's raw libcurl client replaying "
      "luagent's requests: %.3f ms/turn." % floor)
print("Ratios (x) are peer / luagent. raw-node = Node fetch() replaying the same requests "
      "(no framework).")
node_floor = med("raw-node", "turn_ms")
hdr = ["stack", "ms/turn", "over floor ms/turn", "over raw-node ms/turn", "CPU ms/turn", "start-up ms",
       "10-turn process ms", "peak RSS MiB"]
rows = []
for n in ["luagent", "openai", "ai-sdk", "langgraph", "raw-node"]:
    if n not in d:
        continue
    t, c, s, o, r = (med(n, k) for k in ("turn_ms", "cpu_ms", "startup_ms", "once_ms", "once_rss"))
    over = None if t is None else t - floor
    rows.append([n, cell(t, "%.2f") + ratio(t, base["turn_ms"]),
                 cell(over, "%.2f") + ("" if n in ("luagent", "raw-node") else ratio(over, base["over"])),
                 "" if n in ("luagent", "raw-node") or node_floor is None or t is None
                 else "%.2f" % (t - node_floor),
                 cell(c, "%.2f") + ratio(c, base["cpu_ms"]),
                 cell(s, "%.0f") + ratio(s, base["startup_ms"]),
                 cell(o, "%.0f") + ratio(o, base["once_ms"]),
                 cell(None if r is None else r / 1024, "%.1f") + ratio(r, base["once_rss"])])
w = [max(len(x) for x in col) for col in zip(hdr, *rows)]
print("| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(hdr)) + " |")
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for row in rows:
    print("| " + " | ".join(v.ljust(w[i]) for i, v in enumerate(row)) + " |")
EOF
