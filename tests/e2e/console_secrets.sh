#!/bin/bash
# e2e: no console response carries a secret's value, whatever characters it
# holds (a quote, a backslash or a newline is escaped in JSON text, so a
# scrub of the printed text missed them: red team 5, F1), and a short
# secret never breaks the JSON (F1b: digits of a timestamp matched it).
set -u
. "$(dirname "$0")/lib/common.sh"
PORT=$(free_port)
cat > "$WS/luagent.lua" <<'LUA'
return { approver = "queue",
  providers = { { name = "demo", kind = "script", turns = {
    { turns = { { text = "plain: tok-PLAIN-1234 quoted: pw\"QUOTE-5678 pem: -----BEGIN KEY-----\nLINE2-SECRET-9999 back: a\\b-SECRET" } } } } } } }
LUA
cd "$WS"
printf 'tok-PLAIN-1234' | "$LUAGENT" secrets set PLAIN >/dev/null 2>&1
printf 'pw"QUOTE-5678' | "$LUAGENT" secrets set QUOTED >/dev/null 2>&1
printf -- '-----BEGIN KEY-----\nLINE2-SECRET-9999' | "$LUAGENT" secrets set PEM >/dev/null 2>&1
printf 'a\\b-SECRET' | "$LUAGENT" secrets set BACK >/dev/null 2>&1
"$LUAGENT" ask "hello" >/dev/null 2>&1 || fail "the scripted ask failed"
"$LUAGENT" console 127.0.0.1:$PORT > c.log 2>&1 &
CPID=$!; PIDS="$PIDS $CPID"
for _ in $(seq 100); do grep -q '^console: http' c.log && break; sleep 0.1; done
grep -q '^console: http' c.log || fail "the console did not start: $(cat c.log)"
py() {
python3 - "$PORT" "$(cat .luagent/console.token)" "$1" <<'PY'
import http.client, json, sys
port, tok, short = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "short"
def req(m, p, body=None, h=None):
    c = http.client.HTTPConnection("127.0.0.1", port); hh = {"Host": f"127.0.0.1:{port}", **(h or {})}
    if body is not None: hh["Content-Type"] = "application/json"
    c.request(m, p, body=json.dumps(body) if body is not None else None, headers=hh)
    r = c.getresponse(); return r, r.read().decode()
r, t = req("POST", "/api/login", {"token": tok})
cookie = r.getheader("Set-Cookie").split(";")[0]
bad = []
r, runs = req("GET", "/api/runs", h={"Cookie": cookie})
json.loads(runs)  # stays valid JSON
rid = json.loads(runs)[0]["id"]
r, t = req("GET", f"/api/runs/{rid}", h={"Cookie": cookie})
for body in (runs, t):
    for line in body.splitlines():
        if line.strip(): json.loads(line)
    dec = body.encode().decode("unicode_escape", "ignore")
    for s in ("tok-PLAIN-1234", 'pw"QUOTE-5678', "-----BEGIN KEY-----\nLINE2-SECRET-9999", "a\\b-SECRET"):
        if s in body or s in dec: bad.append(s)
if not short and "[secret]" not in t: bad.append("no [secret] marker")
print("LEAK" if bad else "clean", bad)
PY
}
out=$(py long)
[ "${out%% *}" = clean ] && pass "secrets with quotes, backslashes and newlines are scrubbed" || fail "$out"
kill $CPID; wait $CPID 2>/dev/null
# a short secret (a PIN) that matches digits of a timestamp: the JSON stays valid
printf '1' | "$LUAGENT" secrets set PIN >/dev/null 2>&1
"$LUAGENT" console 127.0.0.1:$PORT > c.log 2>&1 &
CPID=$!; PIDS="$PIDS $CPID"
for _ in $(seq 100); do grep -q '^console: http' c.log && break; sleep 0.1; done
out=$(py short 2>&1)
[ "${out%% *}" = clean ] && pass "a one-digit secret leaves every response valid JSON" || fail "$out"
kill $CPID; wait $CPID 2>/dev/null
finish
