#!/usr/bin/env python3
"""Drives one `luagent daemon --worker` over its descriptors with N jobs of
the benchmark's automation (ctx.state.n = n + 1), one after the other, as
the scheduler does. Run it under callgrind twice (N and 10 N jobs) and
take the difference for the instructions per run (bench/bench_sched_cg.sh).

Usage: bench_sched_worker.py LUAGENT WORKSPACE N [--json] [WRAPPER...]
--json speaks the JSON frames of builds before the binary job records
(main up to 385d315), so a base build can be measured the same way."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e", "lib"))
import daemon_wire as dw  # noqa: E402

luagent, ws, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rest = sys.argv[4:]
use_json = bool(rest) and rest[0] == "--json"
wrapper = rest[1:] if use_json else rest
src = 'return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 end }\n'
slot = 1800000000.123456
w = dw.Worker(luagent, ws, wrapper)
state = "{}"
for i in range(n):
    if use_json:
        ctx = {"state": json.loads(state), "now": 1800000000, "run_id": f"r{i}",
               "trigger": {"kind": "every", "name": "every 1s", "slot": 1800000000}, "args": {}}
        job = {"run_id": f"r{i}", "name": "a1", "chunk": "automations/a1.lua", "source": src,
               "ctx": ctx, "timeout": 30}
        w.send(dw.frame(json.dumps(job).encode()))
        while True:
            r = json.loads(w.read_frame(120))
            if "ev" not in r:
                break
        state = json.dumps(r.get("state", json.loads(state)), separators=(",", ":"))
    else:
        trig = json.dumps({"kind": "every", "name": "every 1s", "slot": slot}, separators=(",", ":"))
        w.send(dw.frame(dw.job(f"r{i}", src, name="a1", state=state, trigger=trig)))
        r = w.reply(120)
        state = r.get("state", state)
if state != '{"n":%d}' % n:
    sys.exit(f"unexpected state after {n} runs: {state}")
sys.exit(w.close())
