#!/usr/bin/env python3
"""A misbehaving MCP server over stdio for host/tests/it/faults.rs, written on bare JSON-RPC (no SDK: an SDK
would not let a server answer this badly). It initializes and lists its tools correctly, then:

    ok          answers `ok` (the control)
    wrong_id    answers the call under another request id, never under its own
    garbage     writes a line that is not JSON where the answer should be, and no answer
    not_rpc     writes a JSON object that is not JSON-RPC, and no answer
    hang        never answers

Every call is appended to the file named by its first argument, one JSON line {tool, id}.

    bad_server.py LOG --mute    writes {"pid": N} to LOG, then reads and never answers, not even `initialize`
"""

import json
import sys

log_path = sys.argv[1]
if sys.argv[2:] == ["--mute"]:
    with open(log_path, "a") as f:
        f.write(json.dumps({"pid": __import__("os").getpid()}) + "\n")
    for line in sys.stdin:
        pass
    sys.exit(0)
TOOLS = ["ok", "wrong_id", "garbage", "not_rpc", "hang"]


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, rid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bad-server", "version": "1.0.0"},
        }})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": t, "description": t, "inputSchema": {"type": "object"}} for t in TOOLS]}})
    elif method == "tools/call":
        tool = msg["params"]["name"]
        with open(log_path, "a") as f:
            f.write(json.dumps({"tool": tool, "id": rid}) + "\n")
        if tool == "ok":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "ok"}]}})
        elif tool == "wrong_id":
            other = rid + 1000 if isinstance(rid, int) else f"other-{rid}"
            send({"jsonrpc": "2.0", "id": other, "result": {"content": [{"type": "text", "text": "answered under another id"}]}})
        elif tool == "garbage":
            sys.stdout.write("this is not JSON-RPC {\n")
            sys.stdout.flush()
        elif tool == "not_rpc":
            send({"hello": "world", "result": {"content": [{"type": "text", "text": "not JSON-RPC"}]}})
        # hang: nothing at all
    elif rid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
