"""The scheduler <-> worker wire format (src/sched/daemon_wire.c), for tests
and benchmarks that play the scheduler against a real `daemon --worker` or
a worker against the real scheduler.

A frame is a 4-byte little-endian length and the payload. A job ('J') or a
reply ('R') is a kind byte and fields: tag byte, 4-byte LE length, bytes,
NUL. Numbers are the 8 bytes of a native double. Event frames are JSON."""
import json
import os
import socket
import struct
import subprocess

TAGS = dict(run_id=1, name=2, chunk=3, source=4, timeout=5, tainted=6, now=7, node=8,
            state=9, trigger=10, args=11, last_time=12, last_status=13, pid=14, status=15,
            result=16, error=17, code=18, tool_calls=19)
NAMES = {v: k for k, v in TAGS.items()}
NUMBERS = {"timeout", "now", "last_time", "pid", "tool_calls"}


def field(tag, value):
    if isinstance(value, float) or isinstance(value, int) and not isinstance(value, bool):
        raw = struct.pack("<d", float(value))
    elif value is True:
        raw = b""
    else:
        raw = value.encode() if isinstance(value, str) else value
    t = TAGS[tag] if isinstance(tag, str) else tag
    return bytes([t]) + struct.pack("<I", len(raw)) + raw + b"\0"


def record(kind, fields):
    """fields: a list of (tag, value) pairs, kept in order (repeats allowed)."""
    return kind.encode() + b"".join(field(t, v) for t, v in fields)


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def parse(payload):
    """A record as a dict (numbers decoded), or a JSON event frame as a dict."""
    if payload[:1] == b"{":
        return json.loads(payload)
    out, i = {"kind": chr(payload[0])}, 1
    while i < len(payload):
        tag = payload[i]
        (n,) = struct.unpack("<I", payload[i + 1:i + 5])
        raw = payload[i + 5:i + 5 + n]
        name = NAMES.get(tag, str(tag))
        if name in NUMBERS:
            out[name] = struct.unpack("<d", raw)[0]
        elif name == "tainted":
            out[name] = True
        else:
            out[name] = raw.decode("utf-8", "replace")
        i += 5 + n + 1
    return out


def job(run_id, source, name="t", state="{}", now=1_800_000_000, trigger=None, **extra):
    fields = [("run_id", run_id), ("name", name), ("chunk", f"automations/{name}.lua"),
              ("source", source), ("timeout", 10.0), ("now", float(now)), ("state", state),
              ("trigger", trigger or json.dumps({"kind": "manual", "name": "manual"}))]
    fields += list(extra.items())
    return record("J", fields)


class Worker:
    """A real `luagent daemon --worker` on one end of a socketpair."""

    def __init__(self, luagent, workspace, wrapper=()):
        self.sock, theirs = socket.socketpair()
        os.set_inheritable(theirs.fileno(), True)
        fd = theirs.fileno()
        self.proc = subprocess.Popen(
            list(wrapper) + [luagent, "--workspace", workspace, "daemon", "--worker"],
            pass_fds=tuple({fd, 3}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=lambda: os.dup2(fd, 3))  # pass_fds keeps 3 open: it runs first
        theirs.close()
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def read_frame(self, timeout=20):
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack("<I", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    p, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return p
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def reply(self, timeout=20):
        """The next reply record, skipping event frames."""
        while True:
            p = self.read_frame(timeout)
            if p is None:
                return None
            r = parse(p)
            if r.get("kind") == "R":
                return r

    def close(self):
        self.sock.close()
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
