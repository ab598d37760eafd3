"""What the scripted model APIs (chat_api.py, gemini_api.py, responses_api.py) share."""
import os
import time


def wait_for(turn):
    """A turn with "wait_for": PATH is answered once PATH exists (at most 120 s): the test holds the
    model there while a person acts (approves a gated call)."""
    deadline = time.time() + 120
    while turn.get("wait_for") and not os.path.exists(turn["wait_for"]) and time.time() < deadline:
        time.sleep(0.05)


def send(handler, code, ctype, data):
    """Answers a request with `data` (bytes) of type `ctype`."""
    handler.send_response(code)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
