#!/usr/bin/env python3
"""An MCP server over stdio for luagent's protocol-era tests
(tests/e2e/mcp_stateless.sh): revision 2026-07-28 (stateless,
server/discover) and legacy servers that refuse the probe in different ways.

FAKE_MODE:
  modern   speaks only 2026-07-28: answers server/discover; refuses
           initialize; every request must carry _meta with
           io.modelcontextprotocol/protocolVersion = 2026-07-28 (else
           UnsupportedProtocolVersionError, -32022) and
           io.modelcontextprotocol/clientCapabilities (else -32602).
           tools/list comes in two pages.
  refuse   legacy (2025-11-25): server/discover gets -32601; initialize works
  silent   legacy: never answers server/discover
  die      legacy: exits when it gets server/discover
  future   modern, but only version 2027-01-01: server/discover gets -32022
  dual     modern and legacy: server/discover gets -32022 offering only
           2025-11-25; initialize works
  slow     like refuse, but reads nothing for its first 3 seconds (a server
           slow to start, as npx fetching a package)
Tools: echo (answers "echo: TEXT" and, in modern mode, "meta=KEYS" of the
request's _meta), ask (modern: answers resultType input_required), odd
(modern: answers resultType "later").
FAKE_LOG: every message received is appended, one per line.
FAKE_PIDS: the process id is appended at start, one per line.
"""
import json
import os
import sys
import time

MODE = os.environ.get("FAKE_MODE", "modern")
LOG = os.environ.get("FAKE_LOG", "")
MODERN = "2026-07-28"
PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"


def out(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def err(mid, code, message, data=None):
    e = {"code": code, "message": message}
    if data is not None:
        e["data"] = data
    out({"jsonrpc": "2.0", "id": mid, "error": e})


def ok(mid, result):
    if MODE == "modern":
        result = dict(result)
        result.setdefault("resultType", "complete")
    out({"jsonrpc": "2.0", "id": mid, "result": result})


TOOLS = [
    {"name": "echo", "description": "Echoes its text",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
     "annotations": {"readOnlyHint": True, "openWorldHint": False}},
    {"name": "ask", "description": "needs input from the client",
     "inputSchema": {"type": "object", "properties": {}}, "annotations": {"readOnlyHint": True}},
    {"name": "odd", "description": "an unknown resultType",
     "inputSchema": {"type": "object", "properties": {}}, "annotations": {"readOnlyHint": True}},
]


def modern_request(mid, method, params):
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or meta.get(PV) != MODERN:
        return err(mid, -32022, "Unsupported protocol version",
                   {"supported": [MODERN], "requested": meta.get(PV) if isinstance(meta, dict) else None})
    if not isinstance(meta.get(CAPS), dict):
        return err(mid, -32602, "_meta lacks " + CAPS)
    if method == "server/discover":
        return ok(mid, {"supportedVersions": [MODERN], "capabilities": {"tools": {}},
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "fake-stateless", "version": "9.9"}},
                        "ttlMs": 1000, "cacheScope": "public"})
    if method == "tools/list":
        if params.get("cursor") == "page2":
            return ok(mid, {"tools": TOOLS[1:]})
        return ok(mid, {"tools": TOOLS[:1], "nextCursor": "page2"})
    if method == "tools/call":
        name = params.get("name")
        if name == "echo":
            keys = ",".join(sorted(meta.keys()))
            text = "echo: %s meta=%s caps=%s" % (params.get("arguments", {}).get("text"), keys,
                                                 json.dumps(meta.get(CAPS)))
            return ok(mid, {"content": [{"type": "text", "text": text}]})
        if name == "ask":
            return ok(mid, {"resultType": "input_required",
                            "inputRequests": {"q": {"method": "elicitation/create",
                                                    "params": {"message": "your name?",
                                                               "requestedSchema": {"type": "object"}}}}})
        if name == "odd":
            return ok(mid, {"resultType": "later", "content": []})
        return err(mid, -32602, "unknown tool " + str(name))
    return err(mid, -32601, "Method not found")


def legacy_request(mid, method, params, state):
    if method == "server/discover":
        if MODE in ("refuse", "slow"):
            return err(mid, -32601, "Method not found")
        if MODE == "silent":
            return
        if MODE == "die":
            os._exit(4)
        if MODE == "future":
            return err(mid, -32022, "Unsupported protocol version", {"supported": ["2027-01-01"], "requested": MODERN})
        if MODE == "dual":
            return err(mid, -32022, "Unsupported protocol version", {"supported": ["2025-11-25"], "requested": MODERN})
    if method == "initialize":
        if MODE == "future":
            return err(mid, -32601, "initialize is not a method of 2027-01-01")
        state["init"] = True
        return out({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake-legacy", "version": "1.0"}}})
    if not state.get("init"):
        return err(mid, -32600, "not initialized")
    if method == "tools/list":
        return out({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS[:1]}})
    if method == "tools/call":
        meta = params.get("_meta") if isinstance(params, dict) else None
        text = "echo: %s" % params.get("arguments", {}).get("text")
        if isinstance(meta, dict) and PV in meta:
            text += " (modern _meta on a legacy session!)"
        return out({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
    return err(mid, -32601, "Method not found")


def main():
    state = {}
    if os.environ.get("FAKE_PIDS"):
        with open(os.environ["FAKE_PIDS"], "a") as f:
            f.write("%d\n" % os.getpid())
    if MODE == "slow":
        time.sleep(3)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if LOG:
            with open(LOG, "a") as f:
                f.write(line + "\n")
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "id" not in msg or "method" not in msg:
            continue  # notifications and responses
        params = msg.get("params") or {}
        if MODE == "modern":
            modern_request(msg["id"], msg["method"], params)
        else:
            legacy_request(msg["id"], msg["method"], params, state)


main()
