#!/usr/bin/env python3
"""A loopback HTTP proxy that adds `Authorization: Bearer TOKEN` to every
request, for MCP test clients that cannot send headers (the conformance
tool's server mode) against `luagent mcp serve --http`.

usage: auth_proxy.py LISTEN_PORT UPSTREAM_URL TOKEN_FILE
"""
import http.client
import http.server
import sys
import urllib.parse

PORT, UP, TOKEN_FILE = int(sys.argv[1]), urllib.parse.urlsplit(sys.argv[2]), sys.argv[3]
TOKEN = open(TOKEN_FILE).read().strip()


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def forward(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        hdrs = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization", "content-length")}
        hdrs["Authorization"] = "Bearer " + TOKEN
        c = http.client.HTTPConnection(UP.hostname, UP.port, timeout=120)
        c.request(self.command, UP.path or "/", body=body, headers=hdrs)
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        c.close()

    do_POST = do_GET = do_DELETE = forward

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
