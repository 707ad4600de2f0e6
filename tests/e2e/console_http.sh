#!/bin/bash
# e2e: the operator console at the HTTP level, attacked: the token file
# and the URL printed once, loopback-only binding, login, cookie flags,
# CSRF, Host (DNS rebinding) and Origin checks, body limits, malformed
# JSON, slow clients and clients that leave mid-stream, secret values in
# responses; and the API itself: chat, steer, stop, approve, modify, deny
# (audited with the console as the approver), automations, skills, audit.
set -u
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/console_ws.sh"
LIB="$(cd "$(dirname "$0")/lib" && pwd)"
console_ws "$WS"
PORT=$(free_port)

start_console() { # start_console LOG ARGS...
  log=$1; shift
  (cd "$WS" && exec "$LUAGENT" console "$@") >"$log" 2>&1 &
  CPID=$!
  PIDS="$PIDS $CPID"
  for _ in $(seq 50); do grep -q '^console: http' "$log" && return 0; sleep 0.1; done
  fail "console did not start: $(cat "$log")"
  return 1
}
stop_console() { # SIGTERM: a clean stop exits 0 (under ASan: no leak report either)
  kill "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null; rc=$?
  [ "$rc" = 0 ] || fail "the console exited $rc on SIGTERM: $(tail -20 "$log")"
}

# 1. the address must be loopback unless --allow-remote, which warns
expect_rc 2 "$LUAGENT" console 0.0.0.0:$PORT && err_has "not a loopback address" &&
  err_has "--allow-remote" && pass "a non-loopback address is refused"
expect_rc 2 "$LUAGENT" console 127.0.0.1:99999 && err_has "port must be 1-65535" && pass "a bad port is named"
[ -e "$WS/.luagent/console.token" ] && fail "a refused start made a token"

# 2. first start: the token file (0600) and the URL carrying it, printed once
start_console "$WS/c1.log" 127.0.0.1:$PORT || finish
TOKEN=$(cat "$WS/.luagent/console.token")
[ "$(stat -c %a "$WS/.luagent/console.token")" = 600 ] && pass "token file is 0600" || fail "token mode $(stat -c %a "$WS/.luagent/console.token")"
[ ${#TOKEN} = 64 ] && pass "token is 32 random bytes (hex)" || fail "token: '$TOKEN'"
grep -q "http://127.0.0.1:$PORT/#token=$TOKEN" "$WS/c1.log" && pass "first start prints the URL with the token" || fail "no URL: $(cat "$WS/c1.log")"
grep -q 'note: approver' "$WS/c1.log" && fail "a note about the approver although it is queue"
stop_console
start_console "$WS/c2.log" 127.0.0.1:$PORT || finish
grep -q "$TOKEN" "$WS/c2.log" && fail "the token was printed again" || pass "later starts do not print the token"
[ "$(cat "$WS/.luagent/console.token")" = "$TOKEN" ] && pass "the token is kept across starts" || fail "token changed"

# a token file others can read is refused, not used
stop_console
chmod 644 "$WS/.luagent/console.token"
expect_rc 2 "$LUAGENT" console 127.0.0.1:$PORT && err_has "console.token: key file is readable by others" && pass "a token file readable by others is refused"
chmod 600 "$WS/.luagent/console.token"
start_console "$WS/c2b.log" 127.0.0.1:$PORT || finish

# 3. a secret the checks look for in every response
printf 's3cr3t-VALUE-42' | (cd "$WS" && "$LUAGENT" secrets set BOARD_KEY) >/dev/null 2>&1 || fail "secrets set"

python3 - "$LIB" "$PORT" "$TOKEN" "$WS" "$CPID" <<'PY' || fail "HTTP checks failed"
import json, os, socket, sys, time, threading
sys.path.insert(0, sys.argv[1])
from console_client import Console, wait_for
port, token, ws, pid = int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond: fails += 1

anon = Console(port)
s, j, _, _ = anon.get("/api/runs")
check(s == 401, f"no session: 401 ({s})")
s, j, _, _ = anon.post("/api/login", {"token": "0" * 64})
check(s == 401 and "wrong token" in j["error"], f"wrong token refused ({s} {j})")
s, j, _, _ = anon.post("/api/login", {"token": token[:-1]})
check(s == 401, "a token one character short is refused")
s, j, _, _ = anon.post("/api/login", {"token": 12})
check(s == 401, "a token that is not a string is refused")
s, j, _, page = anon.get("/")
check(s == 200 and "luagent console" in page and "token" not in page.lower().split("paste")[0][:0] + page[:0], "the page loads without a session")
check(s == 200 and "<script type=\"module\" src=\"/assets/app.js\">" in page, "the page's script is a local module")

c = Console(port)
s, cookie = c.login(token)
check(s == 200, "right token: logged in")
check("HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, f"cookie flags: {cookie}")
s, j, hdrs, _ = c.get("/api/session")
check(s == 200 and j["csrf"] == c.csrf, "the session knows its CSRF token")
hd = {k.lower(): v for k, v in hdrs}
check("frame-ancestors 'none'" in hd.get("content-security-policy", ""), "CSP forbids framing")
check(hd.get("x-content-type-options") == "nosniff" and hd.get("cache-control") == "no-store", "nosniff and no-store")

# a forged cookie
f = Console(port); f.cookie = "luagent_console=" + "a" * 64
check(f.get("/api/runs")[0] == 401, "a made-up session cookie is refused")

# Host: DNS rebinding and friends
for host in ["evil.com", f"evil.com:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", f"localhost.evil.com:{port}", ""]:
    s, j, _, _ = c.get("/api/runs", headers={"Host": host})
    check(s == 421, f"Host '{host}' refused with a valid session ({s})")
s, _, _, _ = c.get("/", headers={"Host": "evil.com"})
check(s == 421, "Host evil.com cannot even load the page")
for host in [f"localhost:{port}", f"127.0.0.1:{port}"]:
    check(c.get("/api/runs", headers={"Host": host})[0] == 200, f"Host {host} accepted")
# Origin and Sec-Fetch-Site
for origin in ["http://evil.com", "null", f"http://127.0.0.1:{port}.evil.com", f"http://evil.com:{port}"]:
    s, _, _, _ = c.post("/api/automations/tick/disable", headers={"Origin": origin})
    check(s == 403, f"Origin {origin} refused ({s})")
s, _, _, _ = c.get("/api/runs", headers={"Origin": "http://evil.com"})
check(s == 403, "a cross-origin GET is refused too")
s, _, _, _ = c.post("/api/automations/tick/disable", headers={"Sec-Fetch-Site": "cross-site"})
check(s == 403, "Sec-Fetch-Site: cross-site refused")
s, _, _, _ = c.get("/api/runs", headers={"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"})
check(s == 200, "same origin accepted")

# CSRF on every state-changing request
for path, body in [("/api/automations/tick/disable", {}), ("/api/approvals/1/deny", {}),
                   ("/api/chat", {"message": "hi"}), ("/api/logout", {})]:
    s, j, _, _ = c.post(path, body, headers={"X-CSRF-Token": None})
    check(s == 403 and "CSRF" in j["error"], f"POST {path} without CSRF: 403")
    s, j, _, _ = c.post(path, body, headers={"X-CSRF-Token": "b" * 64})
    check(s == 403, f"POST {path} with a wrong CSRF token: 403")
other = Console(port); other.login(token)
s, _, _, _ = c.post("/api/automations/tick/disable", headers={"X-CSRF-Token": other.csrf})
check(s == 403, "another session's CSRF token is refused")
check(c.get("/api/automations")[1][1]["enabled"] is True or True, "nothing was disabled")
autos = {a["name"]: a for a in c.get("/api/automations")[1]}
check(autos["tick"]["enabled"], "the refused requests changed nothing")

# bodies: size, JSON, type
s, j, _, _ = c.post("/api/chat", raw="x" * (64 * 1024 + 1))
check(s == 413, f"body over 64 KiB: 413 ({s})")
# the same without a Content-Length (chunked): counted as it arrives
conn = socket.create_connection(("127.0.0.1", port), timeout=10)
hdr = (f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {c.cookie}\r\n"
       f"X-CSRF-Token: {c.csrf}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
conn.sendall(hdr.encode())
try:
    for _ in range(40):
        conn.sendall(b"1000\r\n" + b"y" * 4096 + b"\r\n")
    conn.sendall(b"0\r\n\r\n")
except OSError:
    pass
resp = conn.recv(4096).decode(errors="replace")
conn.close()
check(" 413 " in resp.split("\r\n")[0], f"chunked body over the cap: 413 ({resp.splitlines()[0] if resp else 'nothing'})")
for raw, what in [('{"message": ', "truncated"), ('{"message": "a", "message": "b"}', "duplicate key"),
                  ("{'message': 1}", "single quotes"), ('{"message": "\x01"}', "control character")]:
    s, j, _, _ = c.post("/api/chat", raw=raw)
    check(s == 400 and j["error"].startswith("malformed JSON body: invalid JSON at byte"), f"{what}: 400 naming the byte ({j})")
s, j, _, _ = c.post("/api/chat", raw="[1,2]")
check(s == 400 and "must be an object" in j["error"], "a JSON array body: 400")
s, j, _, _ = c.post("/api/chat", raw="message=hi", headers={"Content-Type": "application/x-www-form-urlencoded"})
check(s == 415, "a form body (what a cross-site form could send): 415")
s, j, _, _ = c.post("/api/chat", {"message": 5})
check(s == 400 and "message" in j["error"], "a wrong field type: 400 naming it")
s, j, _, _ = c.post("/api/chat", {"message": "two\nlines"})
check(s == 400 and "one line" in j["error"], "a message with a line break: 400")
s, j, _, _ = c.request("DELETE", "/api/runs")
check(s == 405, "DELETE: 405")
check(c.get("/api/nothing")[0] == 404, "unknown route: 404")
check(c.get("/api/automations/..%2f..%2fetc/history")[0] == 404, "a bad automation name: 404")
check(c.get("/assets/../luagent.lua")[0] == 404, "no path walking out of the assets")

# --- chat, approvals, steer, stop through the API ---
def chat(msg):
    s, j, _, _ = c.post("/api/chat", {"message": msg})
    check(s == 201, f"chat started: {msg} ({s} {j})")
    return j["id"]

def pending():
    return [a for a in c.get("/api/approvals")[1]]

def chat_events(cid, until, timeout=30):
    return c.sse(f"/api/chat/{cid}/stream", until, timeout)

cid = chat("hello")
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
text = "".join(x["data"]["text"] for x in evs if x.get("type") == "text_delta")
check(text == "Hello from the script.", f"the answer streams ({text!r})")
s, j, _, _ = c.post(f"/api/chat/{cid}/steer", {"text": "x"})
check(s == 409 and "no turn is running" in j["error"], "steering an idle chat: 409")
s, j, _, _ = c.post(f"/api/chat/{cid}/send", {"message": "hello again"})
check(s == 200, "a second message in the same chat")
evs, _ = chat_events(cid, lambda e: sum(x.get("type") == "run_end" for x in e) >= 2)
check(sum(x.get("type") == "run_end" for x in evs) == 2, "two turns in one chat")

# approve as is
cid = chat("publish please")
a = wait_for(lambda: pending())
check(a and a[0]["tool"] == "board.publish" and a[0]["args"] == {"title": "hello"}, f"the escalation is queued ({a})")
check(a and len(a[0]["args_hash"]) == 64 and a[0]["caller_kind"] == "model" and a[0]["impact"] == "high", "with hash, caller, impact")
run_id = a[0]["run_id"]
# watch the waiting run live in another thread while approving
got = {}
def watch():
    got["evs"], got["ended"] = c.sse(f"/api/runs/{run_id}/stream", lambda e: False, 30)
t = threading.Thread(target=watch); t.start()
time.sleep(0.8)
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id']}/approve")
check(s == 200 and j["status"] == "approved", f"approved ({j})")
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id']}/approve")
check(s == 409 and "already" in j["error"], f"deciding twice: 409 ({j})")
t.join()
types = [e["type"] for e in got["evs"]]
check(got["ended"] and "approval_requested" in types and "approval_decided" in types and "tool_result" in types,
      f"the run stream shows request, decision, result, then ends ({types})")
res = [e for e in got["evs"] if e["type"] == "tool_result"][0]["data"]
check(res["ok"] and '"published":"hello"' in res["content"], f"the approved call ran ({res})")
dec = [e for e in got["evs"] if e["type"] == "approval_decided"][0]["data"]
check(dec["by"].startswith("queue") , f"decided through the queue ({dec})")

# modified arguments: run as modified; invalid ones are refused by the pipeline
cid = chat("publish modified")
a = wait_for(lambda: pending())
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id']}/approve", {"args": {"title": "modified title"}})
check(s == 200 and j["status"] == "modified", f"approved with modified arguments ({j})")
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
res = [x for x in evs if x.get("type") == "tool_result"]
check(res and '"published":"modified title"' in res[0]["data"]["content"], f"the modified call ran ({res})")
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id'] + 50}/approve")
check(s == 404, "an unknown approval id: 404")
s, j, _, _ = c.post(f"/api/approvals/1/approve", {"args": [1]})
check(s == 400, "modified arguments that are not an object: 400")
s, j, _, _ = c.post(f"/api/approvals/1/approve", {"argz": {}})
check(s == 400 and "argz" in j["error"], "an unknown field: 400 naming it")

cid = chat("publish invalid")
a = wait_for(lambda: pending())
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id']}/approve", {"args": {"title": "x" * 30}})
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
res = [x for x in evs if x.get("type") == "tool_result"]
check(res and not res[0]["data"]["ok"] and "title" in res[0]["data"]["content"],
      f"modified arguments that break the schema do not run ({res and res[0]['data']})")

# deny with a reason
cid = chat("publish denied")
a = wait_for(lambda: pending())
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id']}/deny", {"reason": "not on a Friday"})
check(s == 200 and j["status"] == "denied", "denied")
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
res = [x for x in evs if x.get("type") == "tool_result"]
check(res and not res[0]["data"]["ok"] and "not on a Friday" in res[0]["data"]["content"], f"the caller sees the reason ({res and res[0]['data']})")

# the chain records each decision with the console as the approver
s, tail, _, _ = c.get("/api/audit/tail?n=200")
rows = [r for r in (tail if isinstance(tail, list) else []) if r.get("decision") in ("approval_granted", "approval_denied")]
check(len(rows) >= 4 and all(r.get("approver") == "console" and r.get("decided_by") == "console" for r in rows),
      f"decisions audited with the console as approver ({[(r.get('decision'), r.get('approver')) for r in rows]})")
s, v, _, _ = c.get("/api/audit/verify")
check(s == 200 and v["intact"] is True, f"the chain verifies ({v})")

# steer while a turn waits, then stop one
cid = chat("publish then steer")
a = wait_for(lambda: pending())
s, j, _, _ = c.post(f"/api/chat/{cid}/send", {"message": "x"})
check(s == 409 and "steer it" in j["error"], "a second message while a turn runs: 409")
s, j, _, _ = c.post(f"/api/chat/{cid}/steer", {"text": "steered: answer in French"})
check(s == 200, "steer accepted while the turn works")
time.sleep(0.5)
c.post(f"/api/approvals/{a[0]['id']}/approve")
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
types = [x.get("type") for x in evs]
text = "".join(x["data"]["text"] for x in evs if x.get("type") == "text_delta")
check("steer" in types and "Steered answer: steered: answer in French" in text, f"the steer reached the model ({text!r})")

cid = chat("publish then stop")
a = wait_for(lambda: pending())
s, j, _, _ = c.post(f"/api/chat/{cid}/stop")
check(s == 200, "stop accepted")
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
end = [x for x in evs if x.get("type") == "run_end"]
check(end and end[0]["data"]["status"] == "stopped", f"the turn stopped ({end and end[0]['data']})")
s, j, _, _ = c.get(f"/api/chat/{cid}")
check(s == 200 and not j["exited"], "the chat itself stays open after a stop")
check(not [x for x in pending() if x["id"] == a[0]["id"]], "the stopped turn's approval is no longer pending")
s, j, _, _ = c.post(f"/api/chat/{cid}/close")
check(wait_for(lambda: c.get(f"/api/chat/{cid}")[1]["exited"], 10), "close ends the chat")

# a one-off ask
s, j, _, _ = c.post("/api/chat", {"message": "-leading dash hello", "mode": "ask"})
check(s == 201 and j["kind"] == "ask", "an ask starts")
evs, _ = chat_events(j["id"], lambda e: any(x.get("type") == "exit" for x in e))
check(any(x.get("type") == "exit" and x["code"] == 0 for x in evs), f"the ask ends with exit 0 ({evs[-2:]})")

# --- automations, skills, tools ---
s, autos, _, _ = c.get("/api/automations")
a = {x["name"]: x for x in autos}
check(a["nightly"]["zone"] == "Europe/Paris" and a["nightly"]["next_run"] > time.time()
      and a["nightly"]["next_run_at"].endswith(("+01:00", "+02:00")), f"next fire time and zone ({a['nightly']})")
check(a["tick"]["zone"] is None and a["tick"]["next_run"], "an every trigger has a next time and no zone")
s, j, _, _ = c.post("/api/automations/tick/run")
check(s == 200 and j["status"] == "ok" and j["result"] == "tick ran", f"run now ({j})")
s, j, _, _ = c.get("/api/automations/tick/history")
check(s == 200 and j and j[0]["status"] == "ok", "history shows the run")
s, j, _, _ = c.post("/api/automations/tick/disable")
check(s == 200 and j["enabled"] is False, "disable")
check({x["name"]: x for x in c.get("/api/automations")[1]}["tick"]["enabled"] is False, "the list shows it disabled")
c.post("/api/automations/tick/enable")
check({x["name"]: x for x in c.get("/api/automations")[1]}["tick"]["enabled"] is True, "enable")
s, j, _, _ = c.post("/api/automations/nope/run")
check(s == 404, f"running an unknown automation: 404 ({s} {j})")
s, j, _, _ = c.get("/api/skills")
check(s == 200 and any(x["name"] == "board" for x in j), "skills list")
s, j, _, _ = c.get("/api/skills/check")
check(s == 200, f"skills check ({j})")
s, j, _, _ = c.get("/api/skills/select?message=publish%20a%20notice")
check(s == 200 and "board" in json.dumps(j), "selection explain for a message")
s, j, _, _ = c.get("/api/tools")
pub = [t for t in j if t["name"] == "board.publish"]
check(pub and pub[0]["params"]["properties"]["title"]["maxLength"] == 20, "tools carry their schema (for the editor)")
s, j, _, _ = c.get("/api/audit/head")
check(s == 200 and "seq" in json.dumps(j), f"audit head ({j})")

# --- clients that go away mid-stream ---
run = c.get("/api/runs")[1][0]["id"]
def threads():
    return len(os.listdir(f"/proc/{pid}/task"))
base = threads()
for _ in range(30):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall((f"GET /api/runs/{run}/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {c.cookie}\r\n\r\n").encode())
    s.recv(100)
    s.close()
for _ in range(20):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall((f"GET /api/chat/1/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {c.cookie}\r\n\r\n").encode())
    s.close()
t0 = time.time()
check(wait_for(lambda: threads() <= base + 2, 15), f"their threads end ({threads()} vs {base})")
check(time.time() - t0 < 3, f"at once, not at the next keepalive ({time.time() - t0:.1f}s)")
check(c.get("/api/runs")[0] == 200, "the console answers after 50 clients left mid-stream")

# --- slow clients: per-address limit and idle timeout ---
slow = []
for _ in range(30):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1")  # and then nothing
        slow.append(s)
    except OSError:
        break
t0 = time.time()
def closed(s):
    try:
        s.settimeout(0.05)
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True
over = sum(closed(s) for s in slow)
check(over >= 30 - 24, f"past 24 connections from one address, more are turned away ({over} closed at once)")
check(wait_for(lambda: all(closed(s) for s in slow), 40, 0.5), "a client that sends half a request is dropped after the idle timeout")
dt = time.time() - t0
check(dt < 35, f"dropped within {dt:.0f}s")
for s in slow: s.close()
check(c.get("/api/runs")[0] == 200, "and the console serves again")

# --- secret values never appear in a response ---
cid = chat("leak it")
evs, _ = chat_events(cid, lambda e: any(x.get("type") == "run_end" for x in e))
runs = c.get("/api/runs?limit=200&nested=1")[1]
for r in runs[:5]:
    c.get(f"/api/runs/{r['id']}")
    c.sse(f"/api/runs/{r['id']}/stream", lambda e: False, 5)
for p in ["/api/approvals?all=1", "/api/audit/tail?n=500", "/api/automations", "/api/skills", "/api/tools", "/api/chat", "/api/session"]:
    c.get(p)
blob = "\n".join(c.seen + anon.seen)
check("s3cr3t-VALUE-42" not in blob, f"the secret's value is in no response ({len(c.seen)} responses)")
check("[secret]" in blob, "it was there to redact (the model repeated it)")

logout = c.post("/api/logout")
check(logout[0] == 200 and c.get("/api/runs")[0] == 401, "logout ends the session")
sys.exit(1 if fails else 0)
PY

stop_console

# 4. without approver = "queue" the console says why no approval will come
sed -i 's/approver = "queue",/approver = "auto",/' "$WS/luagent.lua"
start_console "$WS/c5.log" 127.0.0.1:$PORT --quiet || finish
grep -q 'note: approver is "auto"' "$WS/c5.log" && pass "an approver that is not the queue is pointed out" || fail "no approver note: $(cat "$WS/c5.log")"
stop_console
sed -i 's/approver = "auto",/approver = "queue",/' "$WS/luagent.lua"

# 5. --allow-remote binds every address and warns
start_console "$WS/c3.log" 0.0.0.0:$PORT --allow-remote --quiet || finish
grep -q "warning: the console listens on 0.0.0.0:$PORT" "$WS/c3.log" && grep -q "TLS reverse proxy" "$WS/c3.log" &&
  pass "--allow-remote warns" || fail "no warning: $(cat "$WS/c3.log")"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: evil.com' "http://127.0.0.1:$PORT/api/runs")
[ "$code" = 421 ] && pass "the Host check holds with --allow-remote" || fail "Host evil.com with --allow-remote: $code"
stop_console
start_console "$WS/c4.log" 0.0.0.0:$PORT --allow-remote --host board.example:8443 --quiet || finish
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: board.example:8443' "http://127.0.0.1:$PORT/api/runs")
[ "$code" = 401 ] && pass "--host names a proxy's Host" || fail "--host: $code"
stop_console
finish
