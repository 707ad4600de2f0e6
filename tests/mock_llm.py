#!/usr/bin/env python3
"""mock_llm.py - a scripted model server for luagent's tests (stdlib only).

Serves both wire formats on 127.0.0.1, streamed (SSE, chunked) and not:
  POST /v1/chat/completions   OpenAI-compatible chat completions
  POST /v1/messages           Anthropic messages
(any path prefix before /chat/completions or /messages works too, e.g. /v1).

Usage:
  mock_llm.py --script FIXTURE.json --port-file PORTFILE --log REQUESTS.jsonl

The fixture is a JSON object {"steps": [STEP, ...]}. Each request consumes
the next step in order ("this request gets these chunks"); after the last
one the last step repeats when it says "repeat": true, else the server
answers 500 "fixture exhausted". With "by_turn": true at the top level the
server keeps no order: a request gets steps[k], k = the number of assistant
messages already in its conversation (the last step when k is past the end),
so any number of clients, one after another or at once, can each run the
same multi-turn task against one server (the benchmarks do). A STEP is
wire-neutral:

  {"text": "answer text",                 # assistant text (may be "")
   "tool_calls": [{"id": "c1", "name": "echo", "arguments": {...}},
                  {"name": "fs.read", "raw_arguments": "{not json"}],
   "usage": {"input": 12, "output": 7},    # token counts to report
   "chunk": 4,                             # text/argument piece size when streaming
   "delay_ms": 0,                          # pause between streamed events
   "fault": null | "429" | "500" | "401" | "hang" | "drop" | "reset" | "overloaded",
   "retry_after": 1,                       # seconds, for "429"
   "hang_s": 30,                           # for "hang": sleep before answering
   "repeat": false,                        # stay on this step forever (endless loop)
   "if_no_tools": STEP,                    # answer this instead when the request offers no
                                           # tools (none, or tool_choice "none")
   "refusal": "text",                      # a refusal: OpenAI message.refusal / delta.refusal
                                           # (content null); Anthropic stop_reason "refusal"
                                           # with stop_details {type, category, explanation}
   "refusal_category": "cyber",            # Anthropic stop_details.category (default null)
   "finish_reason": "length",              # OpenAI: this finish_reason instead of stop/tool_calls
   "stop_reason": "max_tokens",            # Anthropic: this stop_reason instead of end_turn/tool_use
   "blocks": [BLOCK, ...],                 # Anthropic: raw content blocks sent before the text
                                           # and tool_use blocks (thinking with signature,
                                           # redacted_thinking, server_tool_use,
                                           # web_search_tool_result, any type); streamed as the
                                           # API streams them (thinking_delta + signature_delta,
                                           # input_json_delta, or the whole block at start)
   "extra_choices": ["text", ...],         # OpenAI: more choices (index 1, 2...) besides the first,
                                           # interleaved with it when streaming
   "usage": {..., "cache_read": 5, "cache_write": 3},  # cached prompt tokens to report
   "replay": "file",                       # send this file's bytes unchanged as the body (path
                                           # relative to the fixture file): a recorded response
   "status": 200, "content_type": "...",   # for "replay" (default 200, text/event-stream for
                                           # *.sse, else application/json) and "http"
   "body": {...} or "text"}                # for fault "http": the error body to send

Code mode: "code_steps": [STEP, ...] at the top level answers every
request that offers a tool named "lua" (luagent's code mode) from its own
sequence instead of "steps" (same rules: in order, or by_turn), so one
fixture serves a task both ways, e.g. ten tool rounds in "steps" and one
{"name": "lua", "arguments": {"code": "..."}} call with a loop in
"code_steps".

In a step's "text", %{result} becomes the content of the latest tool
result in the request (what the model would have read).

Token counting: with "count_tokens": true at the top level the server
reports counted usage instead of a step's "usage": input = the bytes of
the request's model, system, tools and messages as compact JSON, / 4
(rounded up); output = the bytes of the answer's text, tool names and
arguments, / 4. The log entry of each request then carries
"usage": {"input": I, "output": O}, so a benchmark can add them up.

A fixture may also answer side calls (a summariser, a critic) out of the
main sequence: "when_system": {"TEXT": STEP or [STEP, ...]} answers a
request whose system prompt contains TEXT with the next of those steps
(the last one repeats), without consuming a main step.

Tool names in a fixture are full names (fs.read); the server sends the wire
name the client offered for it (it looks the name up in the request's tools,
trying the client's mapping "." -> "__"), or the name as given when no tool
matches (an unknown tool).

Faults: "429" answers 429 with Retry-After; "500"/"401" answer that status
with a JSON error; "http" answers "status" with "body" (an object as JSON, a
string as it is) and "content_type"; "html" answers 200 with an HTML page
(what a proxy in front of the API sends); "empty" answers 200 with an empty
event stream; "hang" sleeps hang_s before answering (past the client's
timeout); "drop" streams half of the events and closes the connection
without finishing the chunked body; "reset" closes the connection before
any byte; "overloaded" (Anthropic) sends an SSE error event mid-stream.

Connections: by default every response says "Connection: close", so each
request comes on a new TCP connection. With "keep_alive": true at the top
level the successful responses (JSON and streamed) keep the connection open
for the client's next request, as real providers do; a step with
"close_after": true still answers with keep-alive headers and then closes
the connection without a word (a server's idle timeout: the client finds
out on its next request).

Every request is appended to the log as one JSON line, "conn" numbering the
TCP connection it came on (1, 2, ... in the order the server accepted them):
  {"n": 1, "conn": 1, "path": "/v1/messages", "headers": {...}, "body": {...},
   "cache_prefix": {"bytes": B, "previous_bytes": P, "shared_bytes": S,
                    "repeats_previous": true}}
cache_prefix reports what a provider's prompt cache could reuse: the
request's model, tools, system and messages serialised in the order they
came (cache_control markers left out: they move from turn to turn), compared
byte for byte with the previous request on the same path; repeats_previous
is true when the previous request's whole prefix starts this one.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"i": 0, "n": 0, "conn": 0}


def wire_name(full, body, anthropic):
    names = []
    for t in body.get("tools") or []:
        names.append(t.get("name") if anthropic else (t.get("function") or {}).get("name"))
    mapped = full.replace(".", "__")
    if full in names:
        return full
    if mapped in names:
        return mapped
    return full


def system_text(body):
    sys_ = body.get("system")
    if sys_ is None:
        for m in body.get("messages") or []:
            if m.get("role") == "system":
                sys_ = m.get("content")
                break
    if isinstance(sys_, list):
        sys_ = "".join(b.get("text", "") for b in sys_ if isinstance(b, dict))
    return sys_ if isinstance(sys_, str) else ""


def side_step(when, body):
    text = system_text(body)
    for key in sorted(when or {}):
        if key in text:
            seq = when[key] if isinstance(when[key], list) else [when[key]]
            with LOCK:
                k = STATE.setdefault("side_" + key, 0)
                STATE["side_" + key] = k + 1
            return seq[min(k, len(seq) - 1)]
    return None


def next_step(steps, body, by_turn=False, when=None, key="i"):
    side = side_step(when, body)
    if side is not None:
        return side
    if by_turn:
        k = sum(1 for m in body.get("messages") or []
                if isinstance(m, dict) and m.get("role") == "assistant")
        return pick_no_tools(steps[min(k, len(steps) - 1)], body) if steps else None
    with LOCK:
        i = STATE.setdefault(key, 0)
        if i >= len(steps):
            if steps and steps[-1].get("repeat"):
                step = steps[-1]
            else:
                return None
        else:
            step = steps[i]
            if not step.get("repeat"):
                STATE[key] = i + 1
    return pick_no_tools(step, body)


def offered_names(body, anthropic):
    names = []
    for t in body.get("tools") or []:
        names.append(t.get("name") if anthropic else (t.get("function") or {}).get("name"))
    return names


def latest_result(body):
    """The content of the latest tool result in the conversation."""
    for m in reversed(body.get("messages") or []):
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c)
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    c = b.get("content")
                    if isinstance(c, list):
                        c = "".join(x.get("text", "") for x in c if isinstance(x, dict))
                    return c if isinstance(c, str) else json.dumps(c)
    return ""


def count_input(body):
    parts = [body.get("model"), body.get("system"), body.get("tools"), body.get("messages")]
    text = "".join(json.dumps(p, separators=(",", ":"), ensure_ascii=False) for p in parts)
    return (len(text.encode()) + 3) // 4


def count_output(step):
    n = len((step.get("text") or "").encode())
    for tc in step.get("tool_calls") or []:
        n += len(tc.get("name", "").encode())
        n += len(tc["raw_arguments"].encode() if "raw_arguments" in tc
                 else json.dumps(tc.get("arguments", {}), separators=(",", ":")).encode())
    return (n + 3) // 4


def pick_no_tools(step, body):
    tc = body.get("tool_choice")
    no_tools = (not body.get("tools") or tc == "none" or
                (isinstance(tc, dict) and tc.get("type") == "none"))
    if no_tools and step.get("if_no_tools"):
        step = step["if_no_tools"]
    return step


def pieces(s, n):
    n = max(1, int(n or 4))
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mock-llm/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):  # one Handler per TCP connection: number them
        super().setup()
        # Each SSE event is its own small write: without NODELAY, Nagle
        # holds the next one back until the client's delayed ACK (40 ms)
        # on a kept-alive connection. Real servers set it too.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with LOCK:
            STATE["conn"] += 1
            self.conn_n = STATE["conn"]

    def do_GET(self):
        self.send_json(200, {"ok": True})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        with LOCK:
            STATE["n"] += 1
            n = STATE["n"]
        self.req_n = n  # response ids are unique per request, as real APIs' are
        anthropic = self.path.endswith("/messages")
        steps = self.server.steps
        key = "i"
        if self.server.code_steps is not None and "lua" in offered_names(body, anthropic):
            steps, key = self.server.code_steps, "code_i"
        routed = anthropic or self.path.endswith("/chat/completions")
        step = next_step(steps, body, self.server.by_turn, self.server.when, key) if routed else None
        if step is not None and "%{result}" in (step.get("text") or ""):
            step = dict(step)
            step["text"] = step["text"].replace("%{result}", latest_result(body))
        usage = None
        if step is not None and self.server.count_tokens:
            usage = {"input": count_input(body), "output": count_output(step)}
            step = dict(step)
            step["usage"] = usage
        entry = {"n": n, "conn": self.conn_n, "path": self.path, "cache_prefix": self.cache_prefix(raw),
                 "headers": {k.lower(): v for k, v in self.headers.items()
                             if k.lower() in ("authorization", "x-api-key", "anthropic-version",
                                              "content-type", "accept")},
                 "body": body}
        if usage:
            entry["usage"] = usage
        with LOCK:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        if not anthropic and not self.path.endswith("/chat/completions"):
            return self.send_json(404, {"error": {"message": "no route " + self.path}})
        if step is None:
            return self.send_json(500, {"error": {"type": "server_error",
                                                  "message": "fixture exhausted"}})
        fault = step.get("fault")
        if step.get("replay"):
            return self.replay(step)
        if fault == "http":
            b = step.get("body", "")
            data = b if isinstance(b, str) else json.dumps(b)
            return self.send_raw(int(step.get("status", 500)), data.encode(),
                                 step.get("content_type", "application/json"))
        if fault == "html":
            return self.send_raw(200, b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title>"
                                      b"</head><body><h1>Bad Gateway</h1></body></html>\n",
                                 "text/html; charset=utf-8")
        if fault == "empty":
            return self.send_raw(200, b"", "text/event-stream")
        if fault == "reset":
            self.close_hard()
            return
        if fault == "hang":
            time.sleep(float(step.get("hang_s", 30)))
        if fault == "429":
            return self.send_json(429, {"error": {"type": "rate_limit_error",
                                                  "message": "slow down"}},
                                  {"Retry-After": str(step.get("retry_after", 1))})
        if fault in ("500", "401", "400"):
            code = int(fault)
            kind = {500: "server_error", 401: "authentication_error",
                    400: "invalid_request_error"}[code]
            return self.send_json(code, {"error": {"type": kind, "message": "mock " + fault}})
        if body.get("stream"):
            events = (self.anthropic_events if anthropic else self.openai_events)(step, body)
            self.stream(events, step)
        else:
            out = (self.anthropic_message if anthropic else self.openai_message)(step, body)
            if fault == "drop":
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_hard()
                return
            self.send_json(200, out, keep=self.keep(step))
        if step.get("close_after"):
            self.close_connection = True

    def keep(self, step):
        """True when this answer leaves the connection open for the next."""
        return self.server.keep_alive and step.get("fault") != "drop"

    def cache_prefix(self, raw):
        try:  # the order as sent (object_pairs_hook keeps it)
            body = json.loads(raw or b"{}", object_pairs_hook=lambda kv: dict(kv))
        except ValueError:
            return None

        def strip(v):
            if isinstance(v, dict):
                return {k: strip(x) for k, x in v.items() if k != "cache_control"}
            if isinstance(v, list):
                return [strip(x) for x in v]
            return v

        def dump(v):
            return json.dumps(strip(v), separators=(",", ":"), ensure_ascii=False)
        text = dump(body.get("model")) + dump(body.get("tools")) + dump(body.get("system"))
        for m in body.get("messages") or []:
            text += dump(m)
        with LOCK:
            prev = STATE.setdefault("prefix", {}).get(self.path)
            STATE["prefix"][self.path] = text
        out = {"bytes": len(text.encode())}
        if prev is not None:
            k = 0
            for a, b in zip(prev, text):
                if a != b:
                    break
                k += 1
            out["previous_bytes"] = len(prev.encode())
            out["shared_bytes"] = len(prev[:k].encode())
            out["repeats_previous"] = text.startswith(prev)
        return out

    # -- plumbing ---------------------------------------------------------
    def close_hard(self):
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True

    def send_raw(self, code, data, ctype):
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass
        self.close_connection = True

    def replay(self, step):
        path = os.path.join(self.server.fixture_dir, step["replay"])
        with open(path, "rb") as f:
            data = f.read()
        ctype = step.get("content_type") or (
            "text/event-stream" if path.endswith(".sse") else "application/json")
        self.send_raw(int(step.get("status", 200)), data, ctype)

    def send_json(self, code, obj, headers=None, keep=False):
        data = json.dumps(obj).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if not keep:
                self.send_header("Connection", "close")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            keep = False
        self.close_connection = not keep

    def stream(self, events, step):
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            keep = self.keep(step)
            if not keep:
                self.send_header("Connection", "close")
            self.end_headers()
            cut = len(events) // 2 if step.get("fault") == "drop" else None
            delay = float(step.get("delay_ms", 0)) / 1000.0
            for k, ev in enumerate(events):
                if cut is not None and k == cut:
                    self.wfile.flush()
                    self.close_hard()
                    return
                data = ev.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if delay:
                    time.sleep(delay)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            keep = False
        self.close_connection = not keep

    # -- OpenAI -----------------------------------------------------------
    @staticmethod
    def args_text(tc):
        if "raw_arguments" in tc:
            return tc["raw_arguments"]
        return json.dumps(tc.get("arguments", {}))

    @staticmethod
    def openai_usage(u):
        out = {"prompt_tokens": u["input"], "completion_tokens": u["output"],
               "total_tokens": u["input"] + u["output"]}
        if "cache_read" in u:
            out["prompt_tokens_details"] = {"cached_tokens": u["cache_read"], "audio_tokens": 0}
        return out

    def openai_message(self, step, body):
        msg = {"role": "assistant", "content": step.get("text", "") or None,
               "refusal": step.get("refusal")}
        calls = step.get("tool_calls") or []
        if calls:
            msg["tool_calls"] = [{"id": tc.get("id", "call_%d" % k), "type": "function",
                                  "function": {"name": wire_name(tc["name"], body, False),
                                               "arguments": self.args_text(tc)}}
                                 for k, tc in enumerate(calls)]
        u = step.get("usage", {"input": 10, "output": 5})
        fin = step.get("finish_reason") or ("tool_calls" if calls else "stop")
        choices = [{"index": 0, "message": msg, "finish_reason": fin}]
        for k, t in enumerate(step.get("extra_choices") or []):
            choices.append({"index": k + 1, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": t, "refusal": None}})
        if step.get("extra_choices"):
            choices.reverse()  # the first choice need not come first in the array
        return {"id": "chatcmpl-mock-%d" % self.req_n, "object": "chat.completion", "created": 0,
                "model": body.get("model", "mock"), "choices": choices,
                "usage": self.openai_usage(u)}

    def openai_events(self, step, body):
        base = {"id": "chatcmpl-mock-%d" % self.req_n, "object": "chat.completion.chunk", "created": 0,
                "model": body.get("model", "mock")}

        def chunk(delta, finish=None, index=0):
            c = dict(base)
            c["choices"] = [{"index": index, "delta": delta, "finish_reason": finish}]
            return "data: " + json.dumps(c) + "\n\n"
        ev = [chunk({"role": "assistant", "content": "", "refusal": None})]
        for k, t in enumerate(step.get("extra_choices") or []):
            ev.append(chunk({"role": "assistant", "content": t}, None, k + 1))
        if step.get("refusal"):
            for p in pieces(step["refusal"], step.get("chunk")):
                ev.append(chunk({"refusal": p}))
        if step.get("fault") == "overloaded":
            ev.append("data: " + json.dumps({"error": {"message": "overloaded",
                                                       "type": "server_error"}}) + "\n\n")
        text = step.get("text", "")
        if text:
            for p in pieces(text, step.get("chunk")):
                ev.append(chunk({"content": p}))
        calls = step.get("tool_calls") or []
        for k, tc in enumerate(calls):
            ev.append(chunk({"tool_calls": [{"index": k, "id": tc.get("id", "call_%d" % k),
                                             "type": "function",
                                             "function": {"name": wire_name(tc["name"], body, False),
                                                          "arguments": ""}}]}))
            for p in pieces(self.args_text(tc), step.get("chunk")):
                ev.append(chunk({"tool_calls": [{"index": k, "function": {"arguments": p}}]}))
        for k, t in enumerate(step.get("extra_choices") or []):
            ev.append(chunk({}, "stop", k + 1))
        ev.append(chunk({}, step.get("finish_reason") or ("tool_calls" if calls else "stop")))
        if (body.get("stream_options") or {}).get("include_usage"):
            u = step.get("usage", {"input": 10, "output": 5})
            c = dict(base)
            c["choices"] = []
            c["usage"] = self.openai_usage(u)
            ev.append("data: " + json.dumps(c) + "\n\n")
        ev.append("data: [DONE]\n\n")
        return ev

    # -- Anthropic --------------------------------------------------------
    @staticmethod
    def anthropic_usage(u, output):
        out = {"input_tokens": u["input"], "output_tokens": output}
        if "cache_read" in u or "cache_write" in u:
            out["cache_read_input_tokens"] = u.get("cache_read", 0)
            out["cache_creation_input_tokens"] = u.get("cache_write", 0)
        return out

    @staticmethod
    def anthropic_stop(step):
        if step.get("refusal"):
            return "refusal", {"type": "refusal", "category": step.get("refusal_category"),
                               "explanation": step["refusal"]}
        return step.get("stop_reason") or ("tool_use" if step.get("tool_calls") else "end_turn"), None

    def anthropic_message(self, step, body):
        content = list(step.get("blocks") or [])
        if step.get("text"):
            content.append({"type": "text", "text": step["text"]})
        for k, tc in enumerate(step.get("tool_calls") or []):
            if "raw_arguments" in tc:
                inp = tc["raw_arguments"]  # not valid JSON: sent as a string
            else:
                inp = tc.get("arguments", {})
            content.append({"type": "tool_use", "id": tc.get("id", "toolu_%d" % k),
                            "name": wire_name(tc["name"], body, True), "input": inp})
        u = step.get("usage", {"input": 10, "output": 5})
        stop, details = self.anthropic_stop(step)
        out = {"id": "msg_mock_%d" % self.req_n, "type": "message", "role": "assistant",
               "model": body.get("model", "mock"), "content": content,
               "stop_reason": stop, "stop_sequence": None,
               "usage": self.anthropic_usage(u, u["output"])}
        if details:
            out["stop_details"] = details
        return out

    def anthropic_events(self, step, body):
        def sse(kind, obj):
            obj = dict(obj)
            obj["type"] = kind
            return "event: %s\ndata: %s\n\n" % (kind, json.dumps(obj))
        u = step.get("usage", {"input": 10, "output": 5})
        ev = [sse("message_start", {"message": {
            "id": "msg_mock_%d" % self.req_n, "type": "message", "role": "assistant", "content": [],
            "model": body.get("model", "mock"), "stop_reason": None, "stop_sequence": None,
            "usage": self.anthropic_usage(u, 1)}})]
        ev.append(sse("ping", {}))
        idx = 0
        for b in step.get("blocks") or []:
            ev.extend(self.anthropic_block_events(sse, idx, b, step.get("chunk")))
            idx += 1
        text = step.get("text", "")
        if step.get("fault") == "overloaded":
            ev.append(sse("error", {"error": {"type": "overloaded_error",
                                              "message": "Overloaded"}}))
            return ev
        if text:
            ev.append(sse("content_block_start", {"index": idx,
                                                  "content_block": {"type": "text", "text": ""}}))
            for p in pieces(text, step.get("chunk")):
                ev.append(sse("content_block_delta", {"index": idx, "delta": {
                    "type": "text_delta", "text": p}}))
            ev.append(sse("content_block_stop", {"index": idx}))
            idx += 1
        calls = step.get("tool_calls") or []
        for k, tc in enumerate(calls):
            ev.append(sse("content_block_start", {"index": idx, "content_block": {
                "type": "tool_use", "id": tc.get("id", "toolu_%d" % k),
                "name": wire_name(tc["name"], body, True), "input": {}}}))
            for p in pieces(self.args_text(tc), step.get("chunk")):
                ev.append(sse("content_block_delta", {"index": idx, "delta": {
                    "type": "input_json_delta", "partial_json": p}}))
            ev.append(sse("content_block_stop", {"index": idx}))
            idx += 1
        stop, details = self.anthropic_stop(step)
        delta = {"stop_reason": stop, "stop_sequence": None}
        if details:
            delta["stop_details"] = details
        ev.append(sse("message_delta", {"delta": delta, "usage": {"output_tokens": u["output"]}}))
        ev.append(sse("message_stop", {}))
        return ev

    @staticmethod
    def anthropic_block_events(sse, idx, b, chunk):
        """One raw content block as the messages stream sends it."""
        t = b.get("type")
        ev = []
        if t == "thinking":
            ev.append(sse("content_block_start", {"index": idx, "content_block": {
                "type": "thinking", "thinking": "", "signature": ""}}))
            for p in pieces(b.get("thinking", ""), chunk):
                ev.append(sse("content_block_delta", {"index": idx, "delta": {
                    "type": "thinking_delta", "thinking": p}}))
            ev.append(sse("content_block_delta", {"index": idx, "delta": {
                "type": "signature_delta", "signature": b.get("signature", "")}}))
        elif t in ("server_tool_use", "mcp_tool_use"):
            start = dict(b)
            start["input"] = {}
            ev.append(sse("content_block_start", {"index": idx, "content_block": start}))
            for p in pieces(json.dumps(b.get("input", {})), chunk):
                ev.append(sse("content_block_delta", {"index": idx, "delta": {
                    "type": "input_json_delta", "partial_json": p}}))
        elif t == "text":
            start = {"type": "text", "text": ""}
            ev.append(sse("content_block_start", {"index": idx, "content_block": start}))
            for c in b.get("citations") or []:
                ev.append(sse("content_block_delta", {"index": idx, "delta": {
                    "type": "citations_delta", "citation": c}}))
            for p in pieces(b.get("text", ""), chunk):
                ev.append(sse("content_block_delta", {"index": idx, "delta": {
                    "type": "text_delta", "text": p}}))
        else:  # redacted_thinking, *_tool_result, unknown types: whole at start
            ev.append(sse("content_block_start", {"index": idx, "content_block": b}))
        ev.append(sse("content_block_stop", {"index": idx}))
        return ev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    with open(a.script) as f:
        fixture = json.load(f)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.steps = fixture.get("steps", [])
    srv.when = fixture.get("when_system") or {}
    srv.by_turn = bool(fixture.get("by_turn"))
    srv.code_steps = fixture.get("code_steps")
    srv.count_tokens = bool(fixture.get("count_tokens"))
    srv.keep_alive = bool(fixture.get("keep_alive"))
    srv.log_path = a.log
    srv.fixture_dir = os.path.dirname(os.path.abspath(a.script))
    open(a.log, "a").close()
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(tmp, a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
