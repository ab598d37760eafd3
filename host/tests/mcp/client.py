#!/usr/bin/env python3
"""A scriptable MCP client for host/tests/it/proxy.rs, on the Python MCP SDK (its ClientSession over its stdio
transport, unchanged).

    client.py [--name CLIENT_NAME] -- SERVER_CMD [ARGS...]
    client.py [--name CLIENT_NAME] --url http://127.0.0.1:PORT/mcp [--header NAME:VALUE]...
                                                   (the SDK's Streamable HTTP transport)
    --approve-as NAME [--decision approve|deny|decline]
                the client offers elicitation and answers an approval request (`run --approve-via
                elicitation`) as NAME
    --answer    the client offers sampling, elicitation and roots, and answers each at once (sampled text
                `sampled: <the prompt>`, elicitation accepted with {"answer": "yes"}, one root
                file:///project); log messages the server sends are kept

Reads one JSON command a line on standard input and writes one JSON answer a line on standard output:

    {"op": "init"}                                  initialize; {"ok", "server", "instructions"} or {"ok": false, "error": {code, message}}
    {"op": "discover"}                              the handshake-less lifecycle (server/discover, then per-request metadata)
    {"op": "list"}                                  tools/list; {"ok", "tools": [names]}
    {"op": "call", "tool": T, "args": {...}}        tools/call; {"ok", "is_error", "text", "structured"} or {"ok": false, "error"}
    {"op": "use"}                                   the conformance fixture's resources, template, prompts and a completion
                                                    (as ts_client.mjs); {"ok", "resources", "text", "prompt", "completion", ...}
    {"op": "cancel", "tool": T, "after": S}         start a tools/call and cancel it after S seconds; {"ok", "cancelled"}
    {"op": "send", "tool": T, "args": {...}}        start a tools/call and answer at once (the call's result is not reported)
    {"op": "notifications"}                         the server notifications received so far (methods), then forgets them
    {"op": "asked"}                                 what servers asked of this client (--answer) and the log messages it
                                                    got, then forgets them; {"ok", "asked": [...], "logs": [...]}
    {"op": "bench", "tool": T, "args": {}, "n": N}  N sequential calls; {"ok", "us": [microseconds per call]}
    {"op": "pid"}                                   the server process's pid
    {"op": "signal", "sig": "INT"|"TERM"|"KILL"}    signal the server process
    {"op": "wait_exit", "timeout": S}               wait for the server process to exit by itself; {"ok", "returncode"}
    {"op": "close"}                                 clean shutdown (the SDK closes the server's stdin, then escalates);
                                                    {"ok", "returncode"}, then the client exits

The server process is the SDK's own (mcp.client.stdio.stdio_client); the client only keeps a handle on it to
report its pid and exit code.
"""

import argparse
import json
import signal
import sys
import time

import anyio
import httpx2
import mcp.client.stdio as sdk_stdio
from mcp.client.streamable_http import streamable_http_client
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp import types

PROCESS = {}

_spawn = sdk_stdio._create_platform_compatible_process


async def _spawn_and_keep(*args, **kwargs):
    process = await _spawn(*args, **kwargs)
    PROCESS["p"] = process
    return process


sdk_stdio._create_platform_compatible_process = _spawn_and_keep


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def error_of(e):
    if isinstance(e, MCPError):
        return {"code": e.code, "message": e.message, "data": e.data}
    return {"code": None, "message": f"{type(e).__name__}: {e}"}


def result_of(r):
    texts = [c.text for c in r.content if getattr(c, "type", None) == "text"]
    return {"ok": True, "is_error": bool(r.is_error), "text": "\n".join(texts), "structured": r.structured_content}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="test-agent")
    ap.add_argument("--url", help="a Streamable HTTP endpoint instead of a server command")
    ap.add_argument("--header", action="append", default=[], help="NAME:VALUE sent with every HTTP request")
    ap.add_argument("--answer", action="store_true", help="offer sampling, elicitation and roots, and answer them")
    ap.add_argument("--approve-as", metavar="NAME", help="offer elicitation, and answer an approval request (`run --approve-via elicitation`) as NAME")
    ap.add_argument("--decision", default="approve", help="with --approve-as: approve, deny, or decline (the form is declined)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    notes = []

    async def on_message(message):
        if isinstance(message, Exception):
            notes.append(f"exception:{message}")
        else:
            notes.append(getattr(message, "method", type(message).__name__))

    asked, logs = [], []

    async def on_sampling(context, params):
        prompt = params.messages[0].content.text
        asked.append({"sampling": prompt})
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=f"sampled: {prompt}"), model="scripted")

    async def on_elicitation(context, params):
        asked.append({"elicitation": params.message})
        if "decision" in (params.requested_schema or {}).get("properties", {}):
            if a.decision == "decline":
                return types.ElicitResult(action="decline")
            return types.ElicitResult(action="accept", content={"decision": a.decision, "approver": a.approve_as or "someone"})
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    async def on_roots(context):
        asked.append({"roots": True})
        return types.ListRootsResult(roots=[types.Root(uri="file:///project", name="project")])

    async def on_log(params):
        logs.append({"level": params.level, "data": params.data})

    answering = {"sampling_callback": on_sampling, "elicitation_callback": on_elicitation, "list_roots_callback": on_roots} if a.answer else {}
    if a.approve_as and not a.answer:
        answering = {"elicitation_callback": on_elicitation}
    stdin = anyio.wrap_file(sys.stdin)
    if a.url:
        headers = dict(h.split(":", 1) for h in a.header)
        transport = streamable_http_client(a.url, http_client=httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) if headers else None)
    else:
        transport = stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:]))
    async with transport as (read, write):
        async with ClientSession(
            read, write, message_handler=on_message, logging_callback=on_log, client_info=types.Implementation(name=a.name, version="1.0.0"), **answering
        ) as session, anyio.create_task_group() as background:

            async def fire(tool, args):
                try:
                    await session.call_tool(tool, args, read_timeout_seconds=120)
                except Exception:
                    pass

            async for line in stdin:
                line = line.strip()
                if not line:
                    continue
                c = json.loads(line)
                op = c["op"]
                try:
                    if op == "init":
                        r = await session.initialize()
                        PROCESS["caps"] = r.capabilities
                        out({"ok": True, "server": r.server_info.name, "instructions": r.instructions, "protocol": r.protocol_version})
                    elif op == "discover":
                        r = await session.discover()
                        session.adopt(r)
                        out({"ok": True, "versions": list(r.supported_versions), "protocol": session.protocol_version})
                    elif op == "list":
                        r = await session.list_tools()
                        out({"ok": True, "tools": [t.name for t in r.tools]})
                    elif op == "call":
                        progress = []

                        async def on_progress(value, total, message):
                            progress.append([value, total, message])

                        kw = {"progress_callback": on_progress} if c.get("progress") else {}
                        r = await session.call_tool(c["tool"], c.get("args") or {}, read_timeout_seconds=c.get("timeout", 120), **kw)
                        res = result_of(r)
                        if c.get("progress"):
                            res["progress"] = progress
                        out(res)
                    elif op == "resources":
                        # Everything but tools (passed unless `run --block`): what the server offers, as the client sees it.
                        caps = PROCESS["caps"]
                        r = await session.list_resources()
                        first = r.resources[0].uri if r.resources else None
                        read = await session.read_resource(first) if first else None
                        p = await session.list_prompts()
                        out({"ok": True, "advertised": {"resources": caps.resources is not None, "prompts": caps.prompts is not None},
                             "resources": [str(x.uri) for x in r.resources], "read": read.model_dump(mode="json", by_alias=True, exclude_none=True) if read else None,
                             "prompts": [x.name for x in p.prompts]})
                    elif op == "use":
                        # The conformance fixture's resources, a template, prompts and a completion, as
                        # host/tests/mcp/ts_client.mjs uses them (so a test compares the proxy with the server alone).
                        dump = lambda m: m.model_dump(mode="json", by_alias=True, exclude_none=True)
                        got = {}
                        got["resources"] = sorted(str(x.uri) for x in (await session.list_resources()).resources)
                        got["templates"] = [x.uri_template for x in (await session.list_resource_templates()).resource_templates]
                        for key, uri in [("text", "test://static-text"), ("binary", "test://static-binary"), ("template", "test://template/123/data")]:
                            got[key] = [dump(c) for c in (await session.read_resource(uri)).contents]
                        got["prompt"] = [dump(m) for m in (await session.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})).messages]
                        got["image_prompt"] = [dump(m) for m in (await session.get_prompt("test_prompt_with_image")).messages]
                        ref = types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments")
                        got["completion"] = (await session.complete(ref, {"name": "arg1", "value": "pa"})).completion.values
                        out({"ok": True, **got})
                    elif op == "cancel":
                        # The call, cancelled by the client after `after` seconds (the SDK sends notifications/cancelled).
                        with anyio.move_on_after(float(c.get("after", 1))) as scope:
                            await session.call_tool(c["tool"], c.get("args") or {}, read_timeout_seconds=120)
                        out({"ok": True, "cancelled": scope.cancelled_caught})
                    elif op == "send":
                        background.start_soon(fire, c["tool"], c.get("args") or {})
                        await anyio.sleep(0.2)
                        out({"ok": True})
                    elif op == "asked":
                        out({"ok": True, "asked": list(asked), "logs": list(logs)})
                        asked.clear()
                        logs.clear()
                    elif op == "notifications":
                        out({"ok": True, "notifications": list(notes)})
                        notes.clear()
                    elif op == "bench":
                        us = []
                        for _ in range(int(c["n"])):
                            t = time.perf_counter_ns()
                            r = await session.call_tool(c["tool"], c.get("args") or {})
                            us.append((time.perf_counter_ns() - t) // 1000)
                            if r.is_error:
                                raise RuntimeError("a benchmark call failed: " + str(r.content))
                        out({"ok": True, "us": us})
                    elif op == "pid":
                        out({"ok": True, "pid": PROCESS["p"].pid})
                    elif op == "signal":
                        PROCESS["p"].send_signal(getattr(signal, "SIG" + c["sig"]))
                        out({"ok": True})
                    elif op == "wait_exit":
                        p = PROCESS["p"]
                        with anyio.move_on_after(float(c.get("timeout", 20))):
                            while p.returncode is None:
                                await anyio.sleep(0.02)
                        out({"ok": p.returncode is not None, "returncode": p.returncode})
                    elif op == "close":
                        background.cancel_scope.cancel()
                        break
                    else:
                        out({"ok": False, "error": {"code": None, "message": f"unknown op {op}"}})
                except Exception as e:  # an MCP error or a transport failure: report it, keep going
                    out({"ok": False, "error": error_of(e)})
    p = PROCESS.get("p")
    out({"ok": True, "returncode": p.returncode if p else None})


if __name__ == "__main__":
    anyio.run(main)
