"""The e2e tests' python checks: check(cond, msg) prints "ok: msg" or
"FAIL: msg" and counts the failures; done() exits 1 when any failed.
A test's heredoc imports it with PYTHONPATH="$(dirname "$0")/lib"."""
import sys

_fails = 0


def check(cond, msg):
    global _fails
    print(("ok: " if cond else "FAIL: ") + msg)
    _fails += 0 if cond else 1


def done():
    sys.exit(1 if _fails else 0)
