#!/usr/bin/env python3
"""A remote MCP server for host/tests/it/proxy_http.rs: the Python MCP SDK's MCPServer over its Streamable HTTP
transport, served by uvicorn over HTTPS (or plain HTTP without --cert), on a port of 127.0.0.1.

    remote_server.py [--cert CERT.pem --key KEY.pem] [--log FILE]
    remote_server.py --garbage          (answers every request with bytes that are not MCP)

Prints `PORT <n>` on standard output once it listens. Its tools:

    whoami       the Authorization and X-Team headers the request carried (what the proxy passed on)
    count {n}    reports progress n times, then answers `counted n`
    shrink       removes the tool `hang` and announces notifications/tools/list_changed
    hang         never answers (logs `hang-cancelled` when the client's cancellation reaches it)
    die          exits the process in the middle of the call (the connection drops mid-stream)

Every call is appended to --log as one JSON line {tool, args}, so a test can tell what reached the server.
"""

import argparse
import asyncio
import json
import os
import socket
import sys

import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

ap = argparse.ArgumentParser()
ap.add_argument("--cert")
ap.add_argument("--key")
ap.add_argument("--log")
ap.add_argument("--garbage", action="store_true")
a = ap.parse_args()

server = MCPServer(name="remote")


def log(tool, args):
    if a.log:
        with open(a.log, "a") as f:
            f.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool()
def whoami(ctx: Context) -> str:
    """The headers that reached this server."""
    log("whoami", {})
    h = ctx.headers or {}
    return json.dumps({"authorization": h.get("authorization"), "x-team": h.get("x-team")})


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Counts to n, reporting progress."""
    log("count", {"n": n})
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await asyncio.sleep(0.02)
    return f"counted {n}"


@server.tool()
async def shrink(ctx: Context) -> str:
    """Removes the tool `hang`."""
    log("shrink", {})
    server.remove_tool("hang")
    await ctx.notify_tools_changed()
    return "shrunk"


@server.tool()
async def hang() -> str:
    """Never answers."""
    log("hang", {})
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        log("hang-cancelled", {})
        raise
    return "woke"


@server.tool()
def die() -> str:
    """Exits mid-call."""
    log("die", {})
    sys.stdout.flush()
    os._exit(3)


async def garbage_app(scope, receive, send):
    """Not MCP: a JSON content type over bytes that are not JSON-RPC."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{this is not json-rpc"})


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    if a.garbage:
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        uvicorn.Server(uvicorn.Config(garbage_app, log_level="warning")).run(sockets=[sock])
        return
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", ssl_certfile=a.cert, ssl_keyfile=a.key)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
