# Approvals inside `luagent chat` on a real terminal (python3 pty): the
# prompt shows tool, caller, impact, reason and arguments; the steer reader
# pauses while the prompt owns the terminal, so the answers typed there are
# not steers; deny with a reason (the model sees it) and modify (edited
# JSON, run after validation) both work; Ctrl-D ends the chat.
. "$(dirname "$0")/lib/mock.sh" "$1"
for f in a b c; do echo $f > "$WS/data/$f.txt"; done
start_mock m '{"steps":[
 {"tool_calls":[{"id":"c1","name":"fs.delete","arguments":{"path":"a.txt"}}]},
 {"tool_calls":[{"id":"c2","name":"fs.delete","arguments":{"path":"b.txt"}}]},
 {"text":"Done with the files."}]}'
config "providers = { $(provider openai $PORT_m) }"
cat > "$WS/drive.py" <<'PY'
import os, pty, sys, time, select
binary, ws = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.chdir(ws)
    os.execv(binary, [binary, "chat", "--session", "files", "--tools", "fs.*"])
out = b""
def read_until(token, timeout=15):
    global out
    end = time.time() + timeout
    while token not in out:
        left = end - time.time()
        if left <= 0:
            sys.stdout.write(out.decode(errors="replace"))
            raise SystemExit("timed out waiting for %r" % token)
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                sys.stdout.write(out.decode(errors="replace"))
                raise SystemExit("EOF waiting for %r" % token)
            out += chunk
def say(line):
    os.write(fd, line.encode() + b"\n")
    time.sleep(0.1)
read_until(b"you> ")
say("clean up the files")
read_until(b"approve? ")
say("n")
read_until(b"reason")
say("keep a, it is needed")
read_until(b"approve? ")
say("e")
read_until(b"new arguments")
say('{"path":"c.txt"}')
read_until(b"Done with the files.")
read_until(b"you> ")
os.write(fd, b"\x04")
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 99)
PY
OUT=$(timeout 60 python3 "$WS/drive.py" "$LUAGENT" "$WS" 2>&1); RC=$?; ERR=""
expect_rc 0 "chat with approvals on a terminal"
expect_out "tool:    fs.delete (impact" "prompt shows the tool and impact"
expect_out "caller:  model" "prompt shows the caller"
expect_out 'args:    {"path":"a.txt"}' "prompt shows the arguments"
expect_out "reason:" "prompt shows the reason"
[ -f "$WS/data/a.txt" ] && ok "denied: a.txt kept" || fail "a.txt deleted"
[ -f "$WS/data/b.txt" ] && ok "modified: b.txt kept" || fail "b.txt deleted"
[ ! -f "$WS/data/c.txt" ] && ok "modified: c.txt deleted instead" || fail "c.txt still there"
check m 'len(reqs) == 3' "three model calls"
check m '"keep a, it is needed" in msgs(1)[-1]["content"] and msgs(1)[-1]["role"] == "tool"' "the model sees the denial reason"
check m 'not any(m["role"] == "user" and m["content"] in ("n", "e", "keep a, it is needed", "{\"path\":\"c.txt\"}") for r in range(len(reqs)) for m in msgs(r))' \
  "answers typed at the prompt did not become steers"
finish
