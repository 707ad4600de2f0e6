#!/bin/sh
# Code mode vs tool calls on the same 10-step task (issue 14), against the
# mock model server (tests/mock_llm.py with counted tokens): for each mode
# and wire format, model calls, input and output tokens as the mock counts
# them (bytes / 4), wall time and the CPU time of the luagent process.
# Usage: bench/run_codemode.sh BUILD_DIR   (REPS=N, default 10)
B=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
exec python3 - "$B/luagent" "$SRC/tests/mock_llm.py" "${REPS:-10}" <<'PY'
import json, os, subprocess, sys, tempfile, time, shutil, statistics

luagent, mock, reps = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ws = tempfile.mkdtemp(prefix="luagent_bench_codemode_")
os.makedirs(ws + "/skills/calc")
open(ws + "/skills/calc/skill.lua", "w").write('''return {
  name = "calc", description = "Arithmetic", keywords = { "add" },
  tools = { add = {
    description = "Add two numbers",
    params = { type = "object", required = { "a", "b" }, additionalProperties = false,
               properties = { a = { type = "number" }, b = { type = "number" } } },
    impact = "read",
    run = function(args) return { sum = args.a + args.b } end } },
}''')

# The task: add 1..10 with calc.add, one step at a time. Tool calls: ten
# rounds (each call needs the previous sum) and the answer. Code mode: one
# lua call with a loop and the answer.
steps, s = [], 0
for i in range(1, 11):
    steps.append({"text": "Step %d." % i,
                  "tool_calls": [{"id": "c%d" % i, "name": "calc.add", "arguments": {"a": s, "b": i}}]})
    s += i
steps.append({"text": "The total is 55."})
code = ("local s = 0\nfor i = 1, 10 do\n  s = tools.call(\"calc.add\", { a = s, b = i }).sum\nend\n"
        "return s")
code_steps = [{"text": "One chunk.", "tool_calls": [{"id": "l1", "name": "lua", "arguments": {"code": code}}]},
              {"text": "The total is 55."}]
fx = ws + "/fixture.json"
json.dump({"by_turn": True, "count_tokens": True, "steps": steps, "code_steps": code_steps}, open(fx, "w"))
log, portf = ws + "/mock.log", ws + "/mock.port"
srv = subprocess.Popen([sys.executable, mock, "--script", fx, "--port-file", portf, "--log", log])
for _ in range(200):
    if os.path.exists(portf):
        break
    time.sleep(0.025)
port = int(open(portf).read())

def lines():
    return [json.loads(l) for l in open(log) if l.strip()]

rows = []
try:
    for kind in ("openai", "anthropic"):
        open(ws + "/luagent.lua", "w").write(
            'return { providers = { { name = "mock", kind = "%s", base_url = "http://127.0.0.1:%d/v1", '
            'model = "m", max_retries = 0 } } }\n' % (kind, port))
        for mode in ("tools", "lua"):
            walls, cpus, calls, tin, tout = [], [], [], [], []
            for r in range(reps):
                before = len(lines())
                t0 = time.monotonic()
                p = subprocess.Popen([luagent, "--workspace", ws, "ask", "--mode", mode, "--tools", "calc.add",
                                      "--max-iterations", "12", "Add the numbers 1 to 10 with calc.add, one at a time."],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                out = p.stdout.read().decode()
                _, status, ru = os.wait4(p.pid, 0)
                walls.append(time.monotonic() - t0)
                cpus.append(ru.ru_utime + ru.ru_stime)
                if status != 0 or "55" not in out:
                    sys.exit("bench: %s/%s run %d failed (status %d): %s" % (kind, mode, r, status, out[-300:]))
                reqs = lines()[before:]
                calls.append(len(reqs))
                tin.append(sum(q["usage"]["input"] for q in reqs))
                tout.append(sum(q["usage"]["output"] for q in reqs))
            rows.append((kind, mode, statistics.median(calls), statistics.median(tin), statistics.median(tout),
                         statistics.median(walls) * 1e3, min(walls) * 1e3, statistics.median(cpus) * 1e3))
finally:
    srv.terminate()
    srv.wait()
    shutil.rmtree(ws, ignore_errors=True)

print("code mode vs tool calls, the 10-step add task (median of %d runs of `luagent ask`, mock model server;"
      " wall includes process start, ~40 ms here)" % reps)
print("%-10s %-6s %11s %10s %10s %15s %14s" % ("wire", "mode", "model calls", "input tok", "output tok",
                                              "wall ms med/min", "luagent CPU ms"))
for r in rows:
    print("%-10s %-6s %11d %10d %10d %8.1f/%6.1f %14.1f" % r)
for kind in ("openai", "anthropic"):
    t = [r for r in rows if r[0] == kind]
    a, b = t[0], t[1]
    print("%s: model calls %d -> %d, input tokens %+.0f%%, output tokens %+.0f%%, wall %+.0f%%, CPU %+.0f%%" % (
        kind, a[2], b[2], 100.0 * (b[3] - a[3]) / a[3], 100.0 * (b[4] - a[4]) / a[4],
        100.0 * (b[5] - a[5]) / a[5], 100.0 * (b[7] - a[7]) / a[7]))
PY
