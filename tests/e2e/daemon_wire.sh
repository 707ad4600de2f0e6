#!/bin/bash
# A real worker (`daemon --worker`) against a scheduler that sends it what
# the job format does not allow: records of another kind, fields cut off or
# claiming more bytes than they have, a field twice, fields missing, args
# that are not an object, a ctx.state that is not JSON (a state the store
# holds that a person edited: it starts over as {}, as it always did), a
# job whose run_id cannot be read, then a frame that announces more than
# any frame may hold. Each framed job gets a reply naming what was wrong
# and the worker goes on to run the next good job; the oversized frame
# ends it cleanly (exit 0, no crash). Its job descriptor is close-on-exec,
# so no process a run starts can write replies of its own. The worker side of
# tests/unit/sched/test_daemon_wire.c (which attacks the scheduler).
. "$(dirname "$0")/lib/common.sh"

python3 - "$LUAGENT" "$WS" "$(dirname "$0")/lib" <<'PY' || fail "worker wire checks"
import json, struct, sys
sys.path.insert(0, sys.argv[3])
import daemon_wire as dw
luagent, ws = sys.argv[1], sys.argv[2]
src = 'return { run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1; return ctx.trigger.slot end }\n'
trig = json.dumps({"kind": "every", "name": "every 1s", "slot": 1800000000.75})
w = dw.Worker(luagent, ws)
bad = 0
def check(cond, what):
    global bad
    if cond:
        print("ok:", what)
    else:
        bad += 1
        print("FAIL:", what, file=sys.stderr)

def good(i, state="{}"):
    w.send(dw.frame(dw.job(f"r-good-{i}", src, state=state, trigger=trig)))
    return w.reply()

r = good(0)
check(r and r["status"] == "ok" and r["state"] == '{"n":1}' and r["result"] == "1800000000",
      f"a good job runs (slot in whole seconds): {r}")
# what a run starts (an MCP server's process) must not inherit the job descriptor
flags = [l for l in open(f"/proc/{w.proc.pid}/fdinfo/3") if l.startswith("flags:")][0]
check(int(flags.split()[1], 8) & 0o2000000, f"the worker's fd 3 is close-on-exec ({flags.strip()})")
cases = [
    ("another kind", b"R" + dw.field("run_id", "r-x"), "not a job record"),
    ("a field cut off", dw.job("r-cut", src)[:-3], "claims"),
    ("a field claiming more", dw.record("J", [("run_id", "r-long")]) + bytes([2]) + struct.pack("<I", 1 << 20) + b"x\0", "claims 1048576 bytes"),
    ("a field twice", dw.record("J", [("run_id", "r-2"), ("name", "t"), ("name", "u")]), "appears twice"),
    ("an unknown field", dw.record("J", [("run_id", "r-3"), (77, "x")]), "unknown field 77"),
    ("fields missing", dw.record("J", [("run_id", "r-4"), ("name", "t")]), "a field is missing"),
    ("args not an object", dw.job("r-5", src, trigger=trig, args="[1,2]"), "args that are not a JSON object"),
    ("no trigger", dw.record("J", [("run_id", "r-6"), ("name", "t"), ("chunk", "automations/t.lua"), ("source", src), ("timeout", 5.0), ("now", 1.0)]), "no trigger object or time"),
    ("a NUL in the run id", dw.job("r-7\0x", src, trigger=trig), "malformed job"),
]
for what, payload, why in cases:
    w.send(dw.frame(payload))
    r = w.reply()
    check(r is not None and r["status"] == "failed" and why in r.get("error", ""),
          f"{what}: failed, saying '{why}': {r}")
    r = good(len(what))
    check(r and r["status"] == "ok", f"after {what}, the next good job runs: {r}")
# a ctx.state that is not JSON starts over as {} (as before the binary jobs)
r = good(99, state="{not json")
check(r and r["status"] == "ok" and r["state"] == '{"n":1}', f"a broken stored state starts over: {r}")
# The ctx a job makes, as a tree of its fields made it before they went to
# Lua as one JSON text (sandbox__push_json_text): the slot found as
# cJSON_GetObjectItem found it (any case, the last value of a repeated
# key) and made whole, an integer past 2^53 kept exact, zero bytes and
# UTF-8 in the state, empty arrays kept arrays, a run id that is not UTF-8
# passed as its bytes, last_run's fields, the args.
probe = ('return { name = "p", run = function(ctx) local t, s = ctx.trigger, ctx.state\n'
         '  local k = next(s.z)\n'
         '  return string.format("%s %s %s %s|%d %d %s|%s %s|%s %s %s|%s %s", tostring(t.slot), tostring(t.SLOT),\n'
         '    math.type(t.slot or t.SLOT), tostring(t.big), #k, #s.z[k], math.type(s.i), tostring(s.e[1] == nil),\n'
         '    tostring(getmetatable(s.e)), ctx.run_id:byte(-1), ctx.last_run and ctx.last_run.status,\n'
         '    ctx.last_run and math.type(ctx.last_run.time), tostring(ctx.args.x), math.type(ctx.now))\n'
         'end }\n')
state0 = '{"z":{"a\\u0000b":"x\\u0000y\\u00e9"},"i":9007199254740993,"e":[]}'
ctx_cases = [
    ('{"kind":"every","SLOT":1800000000.5}', {}, "nil 1800000000 integer nil"),
    ('{"slot":1.5,"kind":"x","slot":2.75}', {}, "2 nil integer nil"),
    ('{"slot":9007199254740993,"big":12345678901234567890}', {}, "9007199254740993 nil integer 1.2345678901235e+19"),
    ('{"Slot":3,"slot":4.5}', {}, "4.5 nil float nil"),
]
for trig_text, extra, want in ctx_cases:
    w.send(dw.frame(dw.job("r-ctx\xff".encode("latin-1").decode("latin-1"), probe, state=state0,
                           trigger=trig_text, **extra)))
    r = w.reply()
    got = r and r.get("result", "")
    check(r and r["status"] == "ok" and got.startswith(want + "|3 5 integer|true json.array|"),
          f"ctx from trigger {trig_text}: {r}")
raw_id = dw.record("J", [("run_id", b"r-\xff"), ("name", "p"), ("chunk", "automations/p.lua"),
                         ("source", probe), ("timeout", 10.0), ("now", 1.8e9), ("state", state0),
                         ("trigger", '{"slot":1}'), ("args", '{"x":[1,{"y":null}]}'),
                         ("last_time", 1.7e9), ("last_status", "ok")])
w.send(dw.frame(raw_id))
r = w.reply()
check(r and r["status"] == "ok" and r["result"].endswith("|255 ok integer|table integer"),
      f"a run id that is not UTF-8 arrives as its bytes; last_run and args: {r}")
check(r and json.loads(r["state"]) == {"z": {"a\u0000b": "x\u0000y\u00e9"}, "i": 9007199254740993, "e": []},
      f"the state goes back as it came: {r and r.get('state')}")
# a frame over the limit: the worker stops reading and exits cleanly
w.send(struct.pack("<I", 0x7FFFFFFF) + b"J")
r = w.reply(timeout=20)
check(r is None, "an oversized frame gets no reply")
rc = w.close()
err = w.proc.stderr.read().decode()
check(rc == 0, f"the worker exits 0 after an oversized frame (rc {rc}, stderr {err[:300]})")
sys.exit(1 if bad else 0)
PY
finish
