#!/usr/bin/env python3
"""An MCP server that asks its client while a call runs, for host/tests/it/proxy.rs: the Python MCP SDK's
MCPServer over stdio.

Its tool `ask {question}` logs a message, then asks the client to sample (`sampling/createMessage`), to
elicit (`elicitation/create`) and for its roots (`roots/list`), and answers with what each gave, or the
error the client (or the proxy in between) answered instead:

    {"sampled": TEXT | "error: ...", "elicited": {...} | "error: ...", "roots": [URI...] | "error: ..."}

It serves 2025-11-25 only (the `initialize` handshake; `server/discover` is refused): requests of a server's
own are what that revision has, and a 2026-07-28 connection forbids them. The proxy falls back to
`initialize` for it, so the tests that use it cover the proxy's path for a legacy server.
"""

import json

import anyio

from pydantic import BaseModel
from mcp import types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer(name="asking")


class Answer(BaseModel):
    answer: str


def failed(e):
    return f"error: {getattr(e, 'message', None) or e}"


@server.tool()
async def ask(question: str, ctx: Context) -> str:
    """Asks the client: a log message, then sampling, elicitation and roots."""
    await ctx.info(f"asking: {question}")
    out = {}
    try:
        r = await ctx.session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))],
            max_tokens=20,
            related_request_id=ctx.request_id,
        )
        out["sampled"] = r.content.text
    except Exception as e:
        out["sampled"] = failed(e)
    try:
        r = await ctx.elicit(f"may I? {question}", Answer)
        out["elicited"] = {"action": r.action, "answer": r.data.answer if r.action == "accept" else None}
    except Exception as e:
        out["elicited"] = failed(e)
    try:
        r = await ctx.session.list_roots()
        out["roots"] = [str(x.uri) for x in r.roots]
    except Exception as e:
        out["roots"] = failed(e)
    return json.dumps(out, sort_keys=True)


async def main():
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server() as (read, write), low.lifespan(low) as state:
        await serve_loop(low, read, write, lifespan_state=state, init_options=low.create_initialization_options())


anyio.run(main)
