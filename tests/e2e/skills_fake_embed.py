#!/usr/bin/env python3
"""A fake OpenAI-compatible embeddings server for the skills e2e tests.

POST /ok/v1/embeddings    -> 200 with one deterministic vector per input
                             (letter counts, 26 dimensions)
POST /fail/v1/embeddings  -> 500
Every request appends the number of inputs to LOG. Listens on 127.0.0.1,
an ephemeral port written to PORTFILE. Usage: skills_fake_embed.py PORTFILE LOG
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        inputs = body.get("input", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        with open(sys.argv[2], "a") as f:
            f.write(f"{self.path} {len(inputs)}\n")
        if self.path.startswith("/fail/"):
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "model is loading"}')
            return
        data = []
        for i, text in enumerate(inputs):
            v = [0.0] * 26
            for ch in text.lower():
                if "a" <= ch <= "z":
                    v[ord(ch) - 97] += 1.0
            v[0] += 0.5  # never all zero
            data.append({"object": "embedding", "index": i, "embedding": v})
        out = json.dumps({"object": "list", "data": data, "model": body.get("model")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as f:
    f.write(str(srv.server_address[1]))
srv.serve_forever()
