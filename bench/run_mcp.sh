#!/bin/sh
# MCP client cost (issue 19): N calls of a stdio MCP tool (the fake server
# of tests/mcp, Python) against N calls of the host tool echo, in one
# `luagent run`; and the first call of a trusted server (start,
# initialize, tools/list, one call). Prints wall medians over REPS runs
# and the cost per call. Usage: bench/run_mcp.sh BUILD_DIR (N=2000, REPS=5)
B=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
exec python3 - "$B/luagent" "$SRC/tests/mcp/fake_server.py" "${N:-2000}" "${REPS:-5}" <<'PY'
import os, subprocess, sys, tempfile, time, shutil, statistics
luagent, fake, n, reps = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ws = tempfile.mkdtemp(prefix="luagent_bench_mcp_")
open(ws + "/luagent.lua", "w").write('return { mcp = { servers = { fake = { command = "python3", args = { "%s" } } } } }\n' % fake)
subprocess.run([luagent, "-w", ws, "mcp", "trust", "fake", "--yes"], check=True, stdout=subprocess.DEVNULL)
def wall(script):
    open(ws + "/b.lua", "w").write(script)
    ts = []
    for _ in range(reps):
        t0 = time.monotonic()
        subprocess.run([luagent, "-w", ws, "run", ws + "/b.lua"], check=True, stdout=subprocess.DEVNULL)
        ts.append(time.monotonic() - t0)
    return statistics.median(ts)
first = wall('tools.call("mcp.fake.echo", { text = "x" })\n')
mcp = wall('for i = 1, %d do tools.call("mcp.fake.echo", { text = "x" }) end\n' % n)
host = wall('for i = 1, %d do tools.call("echo", { text = "x" }) end\n' % n)
print("first MCP call (start python, initialize, tools/list, call): %.3f s" % first)
print("%d MCP calls: %.3f s wall; %d host echo calls: %.3f s wall" % (n, mcp, n, host))
print("per call: MCP %.3f ms (after the first), host echo %.3f ms (process start included)"
      % ((mcp - first) * 1000.0 / (n - 1), host * 1000.0 / n))
shutil.rmtree(ws)
PY
