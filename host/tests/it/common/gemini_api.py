#!/usr/bin/env python3
"""A scripted Gemini API (stdlib only) playing the model for Gemini CLI in the hook's tests.

Usage: gemini_api.py SCRIPT.json LOG.jsonl

SCRIPT.json is a JSON list of turns, as chat_api.py takes them:
    {"tool_use": [{"name": "run_shell_command", "input": {"command": "ls"}}]}
    {"text": "all done"}
Only the agent's requests (those declaring tools) take turns, in order; Gemini CLI's side requests
(routing, next-speaker checks: no tools) get a small JSON text that satisfies each of them, and take
none. A turn with "wait_for": PATH is held until PATH exists. After the script, the agent gets
"(script exhausted)".

Serves POST /v1beta/models/<model>:streamGenerateContent (one SSE event), :generateContent and
:countTokens on 127.0.0.1, on a free port it prints alone on its first stdout line. Each agent
request body is appended to LOG.jsonl as one JSON line, with "_turn".
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scripted import send, wait_for

SIDE_ANSWER = json.dumps({"reasoning": "scripted", "next_speaker": "user", "model_choice": "flash",
                          "complexity_score": 1, "complexity_reasoning": "scripted"})


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

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        action = self.path.split("?")[0].rsplit(":", 1)[-1]
        if action == "countTokens":
            self.send(200, "application/json", b'{"totalTokens": 42}')
            return
        if action not in ("streamGenerateContent", "generateContent"):
            self.send(404, "application/json", b'{"error": {"code": 404, "message": "not found"}}')
            return
        agent = any(t.get("functionDeclarations") for t in body.get("tools") or [] if isinstance(t, dict))
        if agent:
            with Handler.lock:
                i = Handler.turn
                Handler.turn += 1
                turn = self.script[i] if i < len(self.script) else {"text": "(script exhausted)"}
                entry = dict(body)
                entry["_turn"] = i
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
            wait_for(turn)
            parts = [{"text": turn["text"]}] if turn.get("text") else []
            parts += [{"functionCall": {"name": c["name"], "args": c.get("input", {})}} for c in turn.get("tool_use", [])]
        else:
            parts = [{"text": SIDE_ANSWER}]
        resp = {"candidates": [{"content": {"role": "model", "parts": parts or [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}}
        if action == "streamGenerateContent":
            self.send(200, "text/event-stream", ("data: " + json.dumps(resp) + "\r\n\r\n").encode())
        else:
            self.send(200, "application/json", json.dumps(resp).encode())


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
