#!/usr/bin/env python3
"""A scripted OpenAI Responses API (stdlib only) playing the model for Codex in the hook's tests.

Usage: responses_api.py SCRIPT.json LOG.jsonl

SCRIPT.json is a JSON list of turns, as chat_api.py takes them; each POST .../responses takes the next:
    {"tool_use": [{"name": "exec_command", "input": {"cmd": "ls"}}]}   one function_call item per call
    ("namespace": "mcp__SERVER" with "name": TOOL for an MCP tool)
    {"text": "all done"}                                              one assistant message
A turn with "wait_for": PATH is held until PATH exists. After the script, "(script exhausted)".

Answers as Server-Sent Events (response.created, output_item.added / done per item,
response.completed with usage) on 127.0.0.1, on a free port it prints alone on its first stdout
line. Each request body is appended to LOG.jsonl as one JSON line, with "_turn".
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scripted import send, wait_for


def sse(event):
    return ("event: %s\ndata: %s\n\n" % (event["type"], json.dumps(event))).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script = []
    log_path = None
    lock = threading.Lock()
    turn = 0

    def log_message(self, fmt, *args):  # stdout carries the port only
        pass

    def send(self, code, ctype, data):
        send(self, code, ctype, data)

    def do_GET(self):
        self.send(404, "application/json", b'{"error": "not found"}')

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if not self.path.split("?")[0].endswith("/responses"):
            self.send(404, "application/json", b'{"error": "only /responses"}')
            return
        with Handler.lock:
            n = Handler.turn
            Handler.turn += 1
            entry = dict(body)
            entry["_turn"] = n
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        turn = self.script[n] if n < len(self.script) else {"text": "(script exhausted)"}
        wait_for(turn)
        items = [{"type": "function_call", "id": "fc_%d_%d" % (n, i), "status": "completed", "call_id": "call_%d_%d" % (n, i),
                  "name": c["name"], "arguments": json.dumps(c.get("input", {}))} for i, c in enumerate(turn.get("tool_use", []))]
        for item, c in zip(items, turn.get("tool_use", [])):
            if c.get("namespace"):  # an MCP tool: namespace "mcp__<server>", name "<tool>"
                item["namespace"] = c["namespace"]
        if "text" in turn:
            items.append({"type": "message", "role": "assistant", "id": "msg_%d" % n, "status": "completed",
                          "content": [{"type": "output_text", "text": turn["text"], "annotations": []}]})
        rid = "resp_%d" % n
        out = [sse({"type": "response.created", "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}})]
        for i, item in enumerate(items):
            out.append(sse({"type": "response.output_item.added", "output_index": i, "item": item}))
            out.append(sse({"type": "response.output_item.done", "output_index": i, "item": item}))
        out.append(sse({"type": "response.completed", "response": {
            "id": rid, "object": "response", "status": "completed", "output": items,
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}}))
        self.send(200, "text/event-stream", b"".join(out))


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        Handler.script = json.load(f)
    Handler.log_path = sys.argv[2]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
