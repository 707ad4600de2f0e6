#!/usr/bin/env python3
"""A Streamable HTTP MCP server whose event streams break, for the client's
resumability test (tests/e2e/mcp_sse_resume.sh).

  sse_drop_server.py PORTFILE LOG

Answers initialize and tools/list with JSON. tools/call answers with an
event stream that breaks before the answer, as the tool's name says:
  drop    one event with id "d1", then the connection is cut in the middle
          of the next event; a GET with Last-Event-ID d1 gets the answer
  poll    a priming event (id "p1", retry 100, no data), then the stream
          ends; the GET gets the answer
  always  every stream (the POST's and each GET's) gives one event with a
          new id and then breaks: the answer never comes
  noid    breaks like drop, but its events have no id: nothing to resume
  nogot   breaks like drop; the GET is answered 405
Every request is logged to LOG as one JSON line {method, rpc, last_event_id}.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORTFILE, LOG = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()
PENDING = {}  # last event id -> (rpc id, tool)
COUNT = [0]


def log(d):
    with LOCK, open(LOG, "a") as f:
        f.write(json.dumps(d) + "\n")


def answer(rid, text):
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}}


def progress(n):
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": n}}


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def json(self, obj, code=200):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "sess-1")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def sse_head(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

    def event(self, eid, obj):
        s = ""
        if eid:
            s += "id: %s\n" % eid
        s += "data: %s\n\n" % json.dumps(obj)
        self.wfile.write(s.encode())
        self.wfile.flush()

    def cut(self):
        # half an event, then the connection goes away
        self.wfile.write(b'data: {"jsonrpc": "2.0", "id"')
        self.wfile.flush()
        self.close_connection = True

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        msg = json.loads(self.rfile.read(n) or b"{}")
        method, rid = msg.get("method"), msg.get("id")
        log({"method": "POST", "rpc": method})
        if method == "initialize":
            return self.json({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "sse-drop", "version": "0"}}})
        if rid is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "tools/list":
            t = [{"name": n, "description": "breaks its stream: " + n, "inputSchema": {"type": "object"},
                  "annotations": {"readOnlyHint": True, "openWorldHint": False}}
                 for n in ("drop", "poll", "always", "noid", "nogot")]
            return self.json({"jsonrpc": "2.0", "id": rid, "result": {"tools": t}})
        if method == "tools/call":
            tool = msg["params"]["name"]
            self.sse_head()
            if tool == "poll":
                PENDING["p1"] = (rid, tool)
                self.wfile.write(b"id: p1\nretry: 100\ndata:\n\n")
                self.wfile.flush()
                self.close_connection = True
                return
            eid = None if tool == "noid" else tool + "1"
            if eid:
                PENDING[eid] = (rid, tool)
            self.event(eid, progress(1))
            return self.cut()
        return self.json({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no " + str(method)}})

    def do_GET(self):
        last = self.headers.get("Last-Event-ID")
        log({"method": "GET", "last_event_id": last, "session": self.headers.get("Mcp-Session-Id")})
        if last not in PENDING:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rid, tool = PENDING.pop(last)
        if tool == "nogot":
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.sse_head()
        if tool == "always":
            COUNT[0] += 1
            eid = "always%d" % (COUNT[0] + 1)
            PENDING[eid] = (rid, tool)
            self.event(eid, progress(COUNT[0] + 1))
            return self.cut()
        self.event(tool + "2", answer(rid, "resumed after " + last))
        self.close_connection = True


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(PORTFILE + ".tmp", PORTFILE)
srv.serve_forever()
