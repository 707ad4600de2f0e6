#!/usr/bin/env python3
"""drive_chat.py - feeds `luagent chat` a script of lines with waits, for the
chat end-to-end tests (stdlib only; sourced by no ctest glob: lives in lib/).

usage: drive_chat.py MOCKLOG OUT ERR -- luagent ARGS...
The script comes on stdin, one action per line:
  say TEXT          write TEXT + newline to the chat's stdin
  wait_requests N   wait until the mock log holds N requests (10 s max)
  wait_err TEXT     wait until the chat's stderr contains TEXT (10 s max)
  wait_out N TEXT   wait until the chat's stdout contains TEXT N times (10 s max)
  sleep S           sleep S seconds
  sigint            send SIGINT to the chat
  close             close the chat's stdin
Exits with the chat's exit code (124 if it does not end within 20 s of the
script's end)."""
import os, signal, subprocess, sys, time

log, out, err = sys.argv[1:4]
cmd = sys.argv[sys.argv.index("--") + 1:]
actions = [l.rstrip("\n") for l in sys.stdin if l.strip()]
fo, fe = open(out, "wb"), open(err, "wb")
p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=fo, stderr=fe)


def nreq():
    try:
        with open(log) as f:
            return sum(1 for l in f if l.strip())
    except OSError:
        return 0


def wait(cond, what):
    t = time.time() + 10
    while time.time() < t:
        if cond():
            return
        if p.poll() is not None:
            break
        time.sleep(0.05)
    sys.stderr.write("drive_chat: gave up waiting for %s\n" % what)


for a in actions:
    verb, _, arg = a.partition(" ")
    if verb == "say":
        p.stdin.write((arg + "\n").encode())
        p.stdin.flush()
    elif verb == "wait_requests":
        wait(lambda: nreq() >= int(arg), "%s requests" % arg)
    elif verb == "wait_err":
        wait(lambda: arg in open(err, errors="replace").read(), repr(arg))
    elif verb == "wait_out":
        n, _, text = arg.partition(" ")
        wait(lambda: open(out, errors="replace").read().count(text) >= int(n), repr(text))
    elif verb == "sleep":
        time.sleep(float(arg))
    elif verb == "sigint":
        p.send_signal(signal.SIGINT)
    elif verb == "close":
        p.stdin.close()
try:
    rc = p.wait(timeout=20)
except subprocess.TimeoutExpired:
    p.kill()
    rc = 124
sys.exit(rc)
