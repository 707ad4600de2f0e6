#!/usr/bin/env python3
"""A minimal MCP client over stdio for luagent's `mcp serve` tests.

usage: client.py SCRIPT.json -- COMMAND ARGS...
SCRIPT is a JSON list of steps: {"send": message-or-raw-string} writes one
line; {"expect": id} reads until the response with that id and prints it
as one JSON line; {"sleep": s}. Prints every response it waited for and
exits 0; exits 1 on EOF or a 60 s timeout.
"""
import json
import subprocess
import sys
import time
import select

def main():
    sep = sys.argv.index("--")
    steps = json.load(open(sys.argv[1]))
    cmd = sys.argv[sep + 1:]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    buf = b""
    for st in steps:
        if "send" in st:
            m = st["send"]
            line = m if isinstance(m, str) else json.dumps(m)
            p.stdin.write(line.encode() + b"\n")
            p.stdin.flush()
        elif "sleep" in st:
            time.sleep(st["sleep"])
        elif "expect" in st:
            want = st["expect"]
            deadline = time.time() + 60
            while True:
                while b"\n" not in buf:
                    r, _, _ = select.select([p.stdout], [], [], max(0, deadline - time.time()))
                    if not r:
                        print("TIMEOUT waiting for id %r" % (want,))
                        return 1
                    chunk = p.stdout.read1(65536)
                    if not chunk:
                        print("EOF waiting for id %r" % (want,))
                        return 1
                    buf += chunk
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)  # the server's stdout must be protocol only
                print(json.dumps(msg, sort_keys=True))
                if msg.get("id") == want:
                    break
    p.stdin.close()
    p.wait(timeout=30)
    return 0

if __name__ == "__main__":
    sys.exit(main())
