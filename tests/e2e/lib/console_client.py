# A small client for the console's HTTP API, shared by the console e2e
# tests: raw http.client so each test controls every header.
import http.client
import json
import re
import socket
import time


class Console:
    def __init__(self, port, host="127.0.0.1"):
        self.port = port
        self.host = host
        self.cookie = None
        self.csrf = None
        self.seen = []  # every response body, for the secret check

    def request(self, method, path, body=None, headers=None, raw=None, timeout=30):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Host": f"127.0.0.1:{self.port}"}
        if self.cookie:
            h["Cookie"] = self.cookie
        if method == "POST":
            h["Content-Type"] = "application/json"
            if self.csrf:
                h["X-CSRF-Token"] = self.csrf
        h.update(headers or {})
        h = {k: v for k, v in h.items() if v is not None}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        self.seen.append(text)
        c.close()
        try:
            j = json.loads(text)
        except ValueError:
            j = None
        return r.status, j, r.getheaders(), text

    def login(self, token):
        s, j, hdrs, _ = self.request("POST", "/api/login", {"token": token})
        if s != 200:
            return s, None
        cookie = [v for k, v in hdrs if k.lower() == "set-cookie"][0]
        self.cookie = cookie.split(";")[0]
        self.csrf = j["csrf"]
        return s, cookie

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body if body is not None else {}, **kw)

    def sse(self, path, until, timeout=30):
        """Reads SSE messages from path until until(list_of_events) is true
        or an 'end' event; returns (events, ended)."""
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nCookie: {self.cookie}\r\n"
               "Accept: text/event-stream\r\n\r\n")
        s.sendall(req.encode())
        raw = b""
        events, ended = [], False
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
                body = sse_body(raw)
                if body is None:
                    continue  # the head is not all there yet
                events, ended = sse_events(body.decode("utf-8", "replace"))
                if ended or until(events):
                    break
        finally:
            s.close()
            self.seen.append(raw.decode("utf-8", "replace"))
        return events, ended


def sse_body(raw):
    """The body received so far of the response in raw (its head, then the
    body, chunked or not): the chunked framing taken out, so an event cut
    by a chunk boundary is whole again once its next chunk is in. None
    until the head is complete."""
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = raw[:head_end].decode("latin-1").lower()
    rest = raw[head_end + 4:]
    if "transfer-encoding: chunked" not in head:
        return rest
    body, at = b"", 0
    while True:
        eol = rest.find(b"\r\n", at)
        if eol < 0:
            return body
        size = int(rest[at:eol].split(b";")[0] or b"0", 16)
        if size == 0 or len(rest) < eol + 2 + size:
            # the last chunk, or one not all here yet: what is here of it
            return body + rest[eol + 2:eol + 2 + size]
        body += rest[eol + 2:eol + 2 + size]
        at = eol + 2 + size + 2


def sse_events(text):
    """The complete events of an SSE text: ([message data...], ended)."""
    events, ended = [], False
    blocks = re.split(r"\r?\n\r?\n", text)
    for block in blocks[:-1]:  # the last one may still be arriving
        ev, data = "message", None
        for line in block.splitlines():
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if ev == "end":
            ended = True
        elif ev == "message" and data is not None:
            events.append(json.loads(data))  # a whole message is JSON, or the test fails
    return events, ended


def wait_for(fn, timeout=30, step=0.2):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = fn()
        except (ConnectionError, OSError):
            # a connection turned away while the server frees the slots of
            # clients that just left (the per-address limit): try again
            v = None
        if v:
            return v
        time.sleep(step)
    return None
