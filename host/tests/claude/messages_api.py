"""A scripted Anthropic Messages API on loopback, for driving the real Claude Code CLI offline.

    python3 messages_api.py SCRIPT.json LOG.ndjson

Binds 127.0.0.1 on a free port, prints that port alone on the first line of stdout, then serves until
killed. Point the CLI at it with ANTHROPIC_BASE_URL=http://127.0.0.1:PORT (any ANTHROPIC_API_KEY).

SCRIPT.json is a list of turns the model plays, in order, one per answer to the main conversation:

    [{"tool_use": [{"name": "Bash", "input": {"command": "echo hello"}}]},
     {"text": "All done."}]

A `tool_use` turn answers with those tool calls (stop_reason `tool_use`); a `text` turn with that text
(stop_reason `end_turn`). Once the script is exhausted every answer is the text "done". A turn may also
name a command to run, as the test's hand, just before it is first answered (`"before": [argv...]`):
how a test does something to the machine between two tool calls of one session.

Which turn a request gets is read from the request itself, not from how many requests came before: a
request of the main conversation (one that offers tools) gets turn N, where N is the number of
assistant messages already in its `messages`. So a retried request gets the same turn again. Every
other request is a side request the CLI makes for itself (a session title, a summary, ...): it gets a
short text and consumes no turn. `/v1/messages/count_tokens` answers a rough count.

Every request is logged to LOG.ndjson as one JSON line: method, path, model, stream, tools (how many
were offered), turn (the scripted turn answered, or null for a side request), kind (`tool_use`,
`text`, `side`, `count_tokens`, `not_found`) and, for a tool_use turn, the tool_use ids sent. When the
main conversation sends tool results back, `tool_results` lists them (`id`, `is_error`, `content`) so
a test can see what the CLI did with each call. Python's standard library only.
"""

import http.server
import json
import subprocess
import sys
import threading

SCRIPT = []
LOG_PATH = None
LOG_LOCK = threading.Lock()


def log(entry):
    with LOG_LOCK, open(LOG_PATH, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def text_of(content):
    """The text of a tool_result's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def last_tool_results(messages):
    """The tool results carried by the last user message, if any."""
    if not messages or messages[-1].get("role") != "user" or not isinstance(messages[-1].get("content"), list):
        return []
    return [
        {"id": b.get("tool_use_id"), "is_error": bool(b.get("is_error", False)), "content": text_of(b.get("content"))}
        for b in messages[-1]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def blocks_for(turn_index):
    """The content blocks and stop reason of a scripted turn (or of "done" past the script's end)."""
    turn = SCRIPT[turn_index] if turn_index < len(SCRIPT) else {"text": "done"}
    if "tool_use" in turn:
        blocks = [
            {"type": "tool_use", "id": f"toolu_script_{turn_index:02d}_{i:02d}", "name": c["name"], "input": c.get("input", {})}
            for i, c in enumerate(turn["tool_use"])
        ]
        return blocks, "tool_use"
    return [{"type": "text", "text": turn.get("text", "done")}], "end_turn"


def usage(output_tokens):
    return {"input_tokens": 10, "output_tokens": output_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = 0
    counter_lock = threading.Lock()
    answered = set()

    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def send_json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_scripted")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"method": "GET", "path": self.path, "kind": "not_found"})
        self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "scripted API: no such endpoint"}})


    def do_POST(self):
        req = self.body()
        path = self.path.split("?", 1)[0]
        entry = {"method": "POST", "path": self.path, "model": req.get("model"), "stream": bool(req.get("stream"))}
        if path.endswith("/v1/messages/count_tokens"):
            entry["kind"] = "count_tokens"
            log(entry)
            return self.send_json(200, {"input_tokens": 100})
        if not path.endswith("/v1/messages"):
            entry["kind"] = "not_found"
            log(entry)
            return self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "scripted API: no such endpoint"}})
        messages = req.get("messages") or []
        tools = req.get("tools") or []
        entry["tools"] = len(tools)
        if tools:
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            before = SCRIPT[turn].get("before") if turn < len(SCRIPT) else None
            with Handler.counter_lock:
                first = turn not in Handler.answered
                Handler.answered.add(turn)
            if before and first:
                entry["before"] = subprocess.run(before, capture_output=True, text=True).returncode
            blocks, stop = blocks_for(turn)
            entry.update(turn=turn, kind=blocks[0]["type"], tool_results=last_tool_results(messages))
            if stop == "tool_use":
                entry["tool_use_ids"] = [b["id"] for b in blocks]
        else:
            blocks, stop = [{"type": "text", "text": "Scripted session"}], "end_turn"
            entry.update(turn=None, kind="side")
        log(entry)
        with Handler.counter_lock:
            Handler.counter += 1
            msg_id = f"msg_scripted_{Handler.counter:04d}"
        model = req.get("model") or "claude-scripted"
        if req.get("stream"):
            self.stream(msg_id, model, blocks, stop)
        else:
            self.send_json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": blocks,
                                 "stop_reason": stop, "stop_sequence": None, "usage": usage(5)})

    def stream(self, msg_id, model, blocks, stop):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", "req_scripted")
        self.end_headers()
        self.close_connection = True

        def event(name, data):
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        event("message_start", {"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                                                     "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage(1)}})
        for i, b in enumerate(blocks):
            if b["type"] == "tool_use":
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
            else:
                event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}})
        event("message_stop", {"type": "message_stop"})
        self.wfile.flush()


def main():
    global SCRIPT, LOG_PATH
    if len(sys.argv) != 3:
        sys.exit("usage: messages_api.py SCRIPT.json LOG.ndjson")
    with open(sys.argv[1], encoding="utf-8") as f:
        SCRIPT = json.load(f)
    LOG_PATH = sys.argv[2]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
