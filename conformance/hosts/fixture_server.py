#!/usr/bin/env python3
"""The scripted MCP server that stands behind the host under test (conformance/hosts/HOSTS.md).

    fixture_server.py TOOLS.json LOG.ndjson

An MCP server over stdio, on the Python MCP SDK's low-level `Server` (so any tool shape can be declared).
Its tools come from TOOLS.json:

    {"name": "fixture", "tools": [
      {"name": "fetch",                                  a tool; inputSchema defaults to {"type": "object"}
       "description": "...", "inputSchema": {...},
       "result": {"text": "...", "structured": {...}, "is_error": false},   what every call answers
       "results": [{...}, {...}],                        or: answers in order (the last one repeats)
       "delay_ms": 0}                                    how long a call takes before it answers
    ]}

A result without `text` answers the text `<tool> ok`; `structured` becomes `structuredContent`.

Everything that reaches it is appended to LOG.ndjson, one JSON object a line, flushed as it happens:

    {"event": "start", "pid": N}                       the process started (before any MCP message)
    {"event": "list"}                                  a tools/list request
    {"event": "call", "tool": T, "arguments": {...}}   a tools/call request, before it is answered

so the runner can tell whether the host started the server at all and which calls reached it, in order.
"""

import json
import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
with open(TOOLS_FILE, encoding="utf-8") as f:
    SPEC = json.load(f)
COUNTS = {}


def log(entry):
    with open(LOG_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def tool_of(name):
    return next((t for t in SPEC.get("tools", []) if t["name"] == name), None)


def answer(spec, n):
    results = spec.get("results")
    r = (results[min(n, len(results) - 1)] if results else spec.get("result")) or {}
    text = r.get("text", f"{spec['name']} ok")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=r.get("structured"),
        is_error=bool(r.get("is_error", False)),
    )


async def list_tools(ctx, params):
    log({"event": "list"})
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=t["name"],
                description=t.get("description", f"fixture tool {t['name']}"),
                input_schema=t.get("inputSchema", {"type": "object"}),
            )
            for t in SPEC.get("tools", [])
        ]
    )


async def call_tool(ctx, params):
    arguments = params.arguments or {}
    log({"event": "call", "tool": params.name, "arguments": arguments})
    spec = tool_of(params.name)
    if spec is None:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"no tool `{params.name}`")], is_error=True)
    n = COUNTS.get(params.name, 0)
    COUNTS[params.name] = n + 1
    if spec.get("delay_ms"):
        await anyio.sleep(spec["delay_ms"] / 1000)
    return answer(spec, n)


server = Server(SPEC.get("name", "fixture"), version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    log({"event": "start", "pid": os.getpid()})
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
