#!/usr/bin/env python3
"""Minimal scripted OpenAI Chat Completions server (stdlib only).

Usage: chat_api.py SCRIPT.json LOG.jsonl [--port N]

SCRIPT.json is a JSON list of turns; the Nth chat-completions request gets
the Nth turn:
    {"tool_use": [{"name": "run_shell_command", "input": {"command": "ls"}}]}
    {"text": "all done"}
After the script is exhausted every further request gets {"text": "(script exhausted)"}.

Listens on 127.0.0.1 (port 0 = a free port unless --port is given) and prints
the port alone on its first stdout line. Each request body (parsed JSON, plus
"_path" and "_turn") is appended as one JSON line to LOG.jsonl.
Supports "stream": true (SSE chunks, tool_calls deltas, final [DONE]) and
non-streamed responses. GET .../models lists one model.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from scripted import wait_for

LOCK = threading.Lock()
STATE = {"n": 0}


def load_script(path):
    with open(path, encoding="utf-8") as f:
        turns = json.load(f)
    if not isinstance(turns, list):
        raise SystemExit("script must be a JSON list of turns")
    return turns


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script = []
    log_path = None

    def log_message(self, fmt, *args):  # keep stdout clean (port line only)
        sys.stderr.write("chat_api: " + (fmt % args) + "\n")

    def _send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": "scripted", "object": "model", "created": 0, "owned_by": "local"}]})
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": "only /chat/completions"}})
            return
        # A request that declares no tools is a side request of the client (opencode's session title):
        # it gets a short text and takes no turn of the script.
        if isinstance(body, dict) and not body.get("tools"):
            idx, turn = -1, {"text": "Scripted title"}
        else:
            with LOCK:
                idx = STATE["n"]
                STATE["n"] += 1
                turn = self.script[idx] if idx < len(self.script) else {"text": "(script exhausted)"}
                if self.log_path:
                    entry = dict(body) if isinstance(body, dict) else {"_body": body}
                    entry["_path"] = self.path
                    entry["_turn"] = idx
                    with open(self.log_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(entry) + "\n")
        wait_for(turn)
        model = body.get("model", "scripted") if isinstance(body, dict) else "scripted"
        cid = "chatcmpl-%d-%d" % (int(time.time()), idx)
        tool_calls = []
        for i, call in enumerate(turn.get("tool_use") or []):
            tool_calls.append({
                "index": i,
                "id": call.get("id") or "call_%d_%d" % (idx, i),
                "type": "function",
                "function": {"name": call["name"],
                             "arguments": json.dumps(call.get("input", {}))},
            })
        text = turn.get("text")
        finish = "tool_calls" if tool_calls else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if isinstance(body, dict) and body.get("stream"):
            self._stream(cid, model, text, tool_calls, finish, usage, body)
        else:
            msg = {"role": "assistant", "content": text if text is not None else None}
            if tool_calls:
                msg["tool_calls"] = [{k: v for k, v in tc.items() if k != "index"} for tc in tool_calls]
            self._send_json(200, {
                "id": cid, "object": "chat.completion", "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": usage,
            })

    def _stream(self, cid, model, text, tool_calls, finish, usage, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        created = int(time.time())

        def chunk(delta, finish_reason=None, extra=None):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created,
                   "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            if extra:
                obj.update(extra)
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        if text:
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                if piece:
                    chunk({"content": piece})
        for tc in tool_calls:
            args = tc["function"]["arguments"]
            chunk({"tool_calls": [{"index": tc["index"], "id": tc["id"], "type": "function",
                                   "function": {"name": tc["function"]["name"], "arguments": ""}}]})
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                if piece:
                    chunk({"tool_calls": [{"index": tc["index"], "function": {"arguments": piece}}]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created,
                   "model": model, "choices": [], "usage": usage}
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    port = 0
    if "--port" in argv:
        port = int(argv[argv.index("--port") + 1])
    Handler.script = load_script(argv[1])
    Handler.log_path = argv[2]
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
