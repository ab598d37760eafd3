#!/usr/bin/env python3
"""The host conformance runner (conformance/hosts/HOSTS.md, README.md): drives whole MCP hosts as black boxes.

    runner.py [--host NAME]... [--transport stdio|http]... [--case ID]... [--expect-fail FILE] [--jobs N] [--keep] [--verbose]
    runner.py --table          rewrites the case table in README.md from the case files (runs nothing)
    runner.py --check-cases    validates the case files (and their fixtures with `runbook-host lint`)

For every host of hosts.json and every case of cases/*.json: lays out the case's directory registry and an
empty runs directory in a temporary directory, starts the host from its command template with the fixture
server (fixture_server.py) behind it, plays the case's client script with the Python MCP SDK's stdio client
(or, for a host's `http_command`, its Streamable HTTP client in one MCP session),
shuts the client down cleanly, then checks what the client saw, what reached the server (the fixture's log),
the host's exit code and the run bundle (its files, the receipt's pins, the report masked as docs/spec/conformance.md#how-expectations-are-written says,
and `runbook-host verify`). Prints a table (case, area, one column per host) and `N passed, M failed` per
host; every failed check names the case's clause and what differed. Exit 1 when any host does not meet its
expectation (all cases pass, or, for a host with `expect_fail`, exactly those cases fail).
"""

import argparse
import contextvars
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = HERE / "cases"
README = HERE / "README.md"

AREAS = [
    "schema-validation",
    "content-hashing",
    "tamper-detection",
    "prerequisite-fail-closed",
    "checkpoint-observation",
    "checkpoint-timeout",
    "allow-list-enforcement",
    "receipt-emission",
    "missing-runbook",
]
CLIENT_NAME = "conformance-client"
REPORT_SCHEMA = "runbook-run-report/v1"
REPORT_KEYS = {
    "schema", "run_id", "document", "envelope_sha256", "profile", "coverage", "outcome", "terminal", "refusals",
    "steps", "deviations", "approvals", "budgets", "checkpoints", "events",
}
# Bounds that keep every case short: a step's own wait, one request (`initialize` may load and compile the
# policy component: a slow host on a loaded machine gets longer), one whole case.
MAX_SLEEP_MS = 3000
INITIALIZE_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 30
CASE_TIMEOUT_S = 120
HEX64 = re.compile(r"^[0-9a-f]{64}$")
CLAUSE_CITES = re.compile(r"(docs/spec/[a-z-]+\.md|seed 00\d)")

CASE_KEYS = {"id", "area", "description", "clause", "profile", "registry", "reference", "server", "client", "refused", "expect", "lint"}
# Every key a case may use, so that a misspelled expectation is an error rather than a check left out.
STEP_KEYS = {"list": {"op", "expect"}, "call": {"op", "tool", "args", "expect"}, "advance": {"op", "to", "expect"}, "sleep": {"op", "ms"}}
STEP_EXPECT_KEYS = {"list": {"tools", "host_tools_include"}, "call": {"is_error", "text", "text_contains", "structured"}}
STEP_EXPECT_KEYS["advance"] = STEP_EXPECT_KEYS["call"]
EXPECT_KEYS = {"exit_code", "server", "bundle"}
SERVER_EXPECT_KEYS = {"started", "calls"}
BUNDLE_KEYS = {"optional", "verify", "report", "run", "envelope", "invokes"}
REGISTRY_KEYS = {"runbooks", "index"}
ENTRY_KEYS = {"id", "version", "document", "stored", "pin", "path", "missing_file"}


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def runbook_host():
    return os.environ.get("RUNBOOK_HOST") or str(ROOT / "target/release/runbook-host")


# ---------------------------------------------------------------------------------------------------
# Cases: loading and validating.


class CaseError(Exception):
    pass


def load_cases():
    cases = []
    seen = set()
    for f in sorted(CASES.glob("*.json")):
        data = json.loads(f.read_text(encoding="utf-8"))
        area = data.get("area")
        if area not in AREAS:
            raise CaseError(f"{f.name}: area `{area}` is not one of {AREAS}")
        for c in data.get("cases", []):
            c.setdefault("area", area)
            c["_file"] = f.name
            check_case(c, area)
            if c["id"] in seen:
                raise CaseError(f"{f.name}: case id `{c['id']}` is used twice")
            seen.add(c["id"])
            cases.append(c)
    # In the order seed 001 lists the areas, then as written.
    return sorted(cases, key=lambda c: AREAS.index(c["area"]))


def check_case(c, area):
    where = f"{c['_file']}: case `{c.get('id')}`"
    unknown = set(c) - CASE_KEYS - {"_file"}
    if unknown:
        raise CaseError(f"{where}: unknown keys {sorted(unknown)}")
    for k in ("id", "description", "clause", "registry", "reference", "server", "expect"):
        if k not in c:
            raise CaseError(f"{where}: `{k}` is missing")
    if c["area"] != area:
        raise CaseError(f"{where}: area `{c['area']}` differs from its file's `{area}`")
    if not CLAUSE_CITES.search(c["clause"]):
        raise CaseError(f"{where}: the clause cites no section of docs/spec/ or seed")
    if c.get("profile", "R1") not in ("R0", "R1", "R2"):
        raise CaseError(f"{where}: profile must be R0, R1 or R2")
    if set(c["expect"]) - EXPECT_KEYS:
        raise CaseError(f"{where}: unknown expect keys {sorted(set(c['expect']) - EXPECT_KEYS)}")
    b = c["expect"].get("bundle")
    if b is not None and set(b) - BUNDLE_KEYS:
        raise CaseError(f"{where}: unknown bundle keys {sorted(set(b) - BUNDLE_KEYS)}")
    if "bundle" not in c["expect"]:
        raise CaseError(f"{where}: expect.bundle is missing (null when no bundle may exist)")
    if set(c["expect"].get("server", {})) - SERVER_EXPECT_KEYS:
        raise CaseError(f"{where}: unknown expect.server keys {sorted(set(c['expect']['server']) - SERVER_EXPECT_KEYS)}")
    if set(c["registry"]) - REGISTRY_KEYS:
        raise CaseError(f"{where}: unknown registry keys {sorted(set(c['registry']) - REGISTRY_KEYS)}")
    for e in c["registry"].get("runbooks", []):
        if set(e) - ENTRY_KEYS or not {"id", "version", "document"} <= set(e):
            raise CaseError(f"{where}: a registry entry has keys {sorted(e)}; allowed {sorted(ENTRY_KEYS)}, id, version and document required")
    for i, s in enumerate(c.get("client", []), 1):
        op = s.get("op")
        if op not in STEP_KEYS:
            raise CaseError(f"{where}: step {i}: op `{op}` is not one of {sorted(STEP_KEYS)}")
        if set(s) - STEP_KEYS[op]:
            raise CaseError(f"{where}: step {i}: unknown keys {sorted(set(s) - STEP_KEYS[op])}")
        if set(s.get("expect", {})) - STEP_EXPECT_KEYS.get(op, set()):
            raise CaseError(f"{where}: step {i}: unknown expect keys {sorted(set(s['expect']) - STEP_EXPECT_KEYS.get(op, set()))}")
        if op == "sleep" and not (0 < s.get("ms", 0) <= MAX_SLEEP_MS):
            raise CaseError(f"{where}: step {i}: a sleep waits 1..{MAX_SLEEP_MS} ms")
    if c.get("refused") is not None and c.get("client"):
        raise CaseError(f"{where}: a case refused at initialize has no client steps")


def source_bytes(src, base=CASES):
    """A document source: {"file": path under cases/}, {"text": exact text}, or {"json": value} (2-space
    indented, one final newline)."""
    if "file" in src:
        return (base / src["file"]).read_bytes()
    if "text" in src:
        return src["text"].encode("utf-8")
    if "json" in src:
        return (json.dumps(src["json"], indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    raise CaseError(f"a document source needs file, text or json: {src}")


def stored_bytes(pinned, edits):
    """The bytes the registry actually holds: the pinned ones with `stored` edits applied, in order."""
    b = pinned
    for e in edits:
        if "append" in e:
            b = b + e["append"].encode("utf-8")
        elif "prepend" in e:
            b = e["prepend"].encode("utf-8") + b
        elif "prepend_bytes_hex" in e:
            b = bytes.fromhex(e["prepend_bytes_hex"]) + b
        elif "replace" in e:
            old, new = (x.encode("utf-8") for x in e["replace"])
            if old not in b:
                raise CaseError(f"stored edit: `{e['replace'][0]}` is not in the document")
            b = b.replace(old, new, 1)
        elif e.get("crlf"):
            b = b.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        elif e.get("strip_final_newline"):
            b = b.rstrip(b"\n")
        elif "document" in e:
            b = source_bytes(e["document"])
        else:
            raise CaseError(f"unknown stored edit {e}")
    return b


def server_spec(case):
    """The fixture server's tools: inline, or {"file": path under cases/}."""
    s = case["server"]
    return json.loads((CASES / s["file"]).read_text()) if "file" in s else s


def substitute(v, places):
    """`{runs}` and `{registry}` inside a call's arguments become the case's own directories."""
    if isinstance(v, str):
        for k, p in places.items():
            v = v.replace("{" + k + "}", p)
        return v
    if isinstance(v, list):
        return [substitute(x, places) for x in v]
    if isinstance(v, dict):
        return {k: substitute(x, places) for k, x in v.items()}
    return v


def doc_path(entry, data):
    ext = "json" if data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{" else "yaml"
    return entry.get("path") or f"{entry['id']}/{entry['version']}/runbook.{ext}"


def build_registry(case, reg):
    """Writes the case's registry; returns {"id@version": pinned bytes}."""
    spec = case["registry"]
    pinned = {}
    index = {"schema": "runbook-registry-index/v1", "runbooks": {}}
    reg.mkdir(parents=True, exist_ok=True)
    for e in spec.get("runbooks", []):
        doc = source_bytes(e["document"])
        stored = stored_bytes(doc, e.get("stored", []))
        path = doc_path(e, doc)
        if not e.get("missing_file"):
            (reg / path).parent.mkdir(parents=True, exist_ok=True)
            (reg / path).write_bytes(stored)
        pin = e.get("pin")
        pin = sha256(source_bytes(pin["of"])) if isinstance(pin, dict) else (pin or sha256(doc))
        index["runbooks"].setdefault(e["id"], {})[e["version"]] = {"sha256": pin, "path": path}
        pinned[f"{e['id']}@{e['version']}"] = doc
    if "index" in spec:
        if spec["index"] is not None:
            (reg / "index.json").write_text(json.dumps(spec["index"], indent=2) + "\n")
    else:
        (reg / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return pinned


# ---------------------------------------------------------------------------------------------------
# Hosts.


def load_hosts(path=None, transports=("stdio", "http")):
    """Each host once per transport it offers: `command` is its stdio template; `http_command`, when
    present, its Streamable HTTP one (column `NAME/http`)."""
    hosts = []
    for h in json.loads(Path(path or HERE / "hosts.json").read_text())["hosts"]:
        if "stdio" in transports:
            hosts.append({**h, "transport": "stdio"})
        if "http" in transports and "http_command" in h:
            hosts.append({**h, "name": f"{h['name']}/http", "base": h["name"], "command": h["http_command"], "transport": "http"})
    return hosts


def expand(template, ctx):
    """A host's command: placeholders filled; an element naming a file or directory relative to the
    repository root becomes absolute (the host runs in the case's own directory)."""
    out = []
    for part in template:
        if part == "{server...}":
            out.extend(ctx["server"])
            continue
        s = re.sub(r"\{(\w+)\}", lambda m: ctx[m.group(1)], part)
        if not os.path.isabs(s) and "/" in s and (ROOT / s).exists():
            s = str(ROOT / s)
        out.append(s)
    return out


def host_ctx(**kw):
    ctx = {"runbook_host": runbook_host(), "python": "conformance/hosts/.venv/bin/python", "repo": str(ROOT)}
    ctx.update(kw)
    return ctx


def host_unavailable(host):
    cmd = expand(host["command"], host_ctx(reference="x@1", registry="r", runs="r", profile="R1", server=[], listen="127.0.0.1:1"))
    exe = cmd[0]
    if os.sep in exe:
        if not os.path.exists(exe):
            return f"`{exe}` does not exist"
    elif shutil.which(exe) is None:
        return f"`{exe}` is not on PATH"
    for part in cmd[1:]:
        if part.endswith(".py") and not os.path.exists(part):
            return f"`{part}` does not exist"
    return None


# ---------------------------------------------------------------------------------------------------
# Playing one case.

PROC = contextvars.ContextVar("proc")


def install_process_hook():
    import mcp.client.stdio as sdk_stdio

    spawn = sdk_stdio._create_platform_compatible_process

    async def spawn_and_keep(*args, **kwargs):
        p = await spawn(*args, **kwargs)
        PROC.get()["p"] = p
        return p

    sdk_stdio._create_platform_compatible_process = spawn_and_keep
    # A host ends its run and writes the report after its client leaves: give it time before the SDK
    # escalates to SIGTERM (which would be counted against it).
    sdk_stdio.PROCESS_TERMINATION_TIMEOUT = 10.0


class Result:
    def __init__(self, case, host):
        self.case = case
        self.host = host
        self.failures = []
        self.notes = []  # HOSTS.md's SHOULDs a host does not do: printed, never a failure
        self.transcript = []
        self.seconds = 0.0
        self.dir = None

    def fail(self, what):
        self.failures.append(what)

    @property
    def ok(self):
        return not self.failures


def short(v, n=300):
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return s if len(s) <= n else s[:n] + "..."


def lay_out(case, host, base_dir, **extra):
    """The case's directory: registry, fixture server spec, the host's command; a transcript writer."""
    res = Result(case, host)
    t0 = time.monotonic()
    d = Path(tempfile.mkdtemp(prefix=f"{case['id']}-", dir=base_dir))
    res.dir = d
    reg, runs = d / "registry", d / "runs"
    pinned = build_registry(case, reg)
    tools_file, log_file = d / "tools.json", d / "server.ndjson"
    tools_file.write_text(json.dumps(server_spec(case), indent=2))
    server = [sys.executable, str(HERE / "fixture_server.py"), str(tools_file), str(log_file)]
    profile = case.get("profile", "R1")
    cmd = expand(host["command"], host_ctx(reference=case["reference"], registry=str(reg), runs=str(runs), profile=profile, server=server, **extra))
    env = {k: os.path.expandvars(v) for k, v in host.get("env", {}).items()}

    def say(line):
        res.transcript.append(f"{(time.monotonic() - t0) * 1000:6.0f} ms  {line}")

    return res, d, reg, runs, pinned, log_file, profile, cmd, env, say, t0


async def play_http(case, host, base_dir, keep):
    """One case over Streamable HTTP (HOSTS.md 1): the host listens on `{listen}`; the client opens one MCP
    session (one run), plays the script and deletes the session; the suite then stops the host with SIGTERM.
    A host that must refuse the reference may refuse before it listens (exit 1, `runbook_failed:` on its
    standard error) or answer `initialize` with the refusal, as over stdio."""
    import anyio
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    listen = f"127.0.0.1:{port}"
    res, d, reg, runs, pinned, log_file, profile, cmd, env, say, t0 = lay_out(case, host, base_dir, listen=listen)
    say(f"$ {' '.join(cmd)}")
    refused_expect = case.get("refused")
    exit_code = None
    full_env = {**{k: v for k, v in os.environ.items() if k in ("HOME", "PATH", "LANG", "TMPDIR", "RUNBOOK_HOST")}, **env}
    with open(d / "host.stderr", "w") as errlog:
        proc = await anyio.open_process(cmd, cwd=str(d), env=full_env, stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog)
        try:
            with anyio.fail_after(CASE_TIMEOUT_S):
                up = await wait_listening(port, proc, anyio, INITIALIZE_TIMEOUT_S)
                if not up:
                    if proc.returncode is None:
                        res.fail(f"the host did not listen on {listen} within {INITIALIZE_TIMEOUT_S} s")
                    else:
                        errlog.flush()
                        line = refusal_line((d / "host.stderr").read_text(errors="replace"))
                        say(f"host exited before listening ({proc.returncode}): {line}")
                        if refused_expect is None:
                            res.fail(f"the host exited with {proc.returncode} before listening, expected the run to be admitted")
                        elif line is None:
                            res.fail("the host exited before listening without a `runbook_failed:` line on its standard error (HOSTS.md 3)")
                        else:
                            check_refusal(line, refused_expect, res.fail)
                            if case.get("lint") and case["lint"] not in line:
                                res.notes.append(f"the refusal does not name the lint finding `{case['lint']}` (HOSTS.md 3: a host SHOULD say which findings made the document invalid)")
                else:
                    url = f"http://{listen}/mcp"
                    say(f"listening: {url}")
                    client = httpx2.AsyncClient(timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=CASE_TIMEOUT_S))
                    try:
                        async with streamable_http_client(url, http_client=client) as (r, w):
                            await play_script(r, w, case, res, say, runs, reg)
                    except Exception as e:  # noqa: BLE001 - a host that broke the session is a failure, named
                        session_broke(res, say, e)
                    finally:
                        await client.aclose()
                    # Deleting the session ends its run (HOSTS.md 1): the report appears without a signal.
                    # Only then is the host stopped, so a host that waits for the signal to end the run
                    # is seen to (its report says `interrupted`).
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and runs.exists() and not any(runs.glob("*/report.json")) and any(runs.glob("*/run.json")):
                        await anyio.sleep(0.05)
        except TimeoutError:
            res.fail(f"the case took longer than {CASE_TIMEOUT_S} s")
        finally:
            exit_code = await stop_host(proc, anyio)
    return finish_case(case, res, d, reg, runs, log_file, pinned, profile, exit_code, say, t0, keep)


def free_port():
    """A loopback port nothing listens on now (the host binds it a moment later)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_listening(port, proc, anyio, timeout):
    """True once the host accepts connections on the port; False when it exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            return False
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.aclose()
            return True
        except OSError:
            await anyio.sleep(0.05)
    return False


async def stop_host(proc, anyio, grace=10.0):
    """SIGTERM, as an operator stops a server; SIGKILL after `grace` seconds. The exit code."""
    import signal

    if proc.returncode is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        with anyio.move_on_after(grace):
            await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
        return None
    return proc.returncode


def refusal_line(stderr):
    """A refusal printed at start (HOSTS.md 3, over HTTP): the text from `runbook_failed:` on its line."""
    for line in stderr.splitlines():
        i = line.find("runbook_failed:")
        if i >= 0:
            return line[i:]
    return None


async def play(case, host, base_dir, keep):
    if host.get("transport") == "http":
        return await play_http(case, host, base_dir, keep)
    import anyio
    from mcp import StdioServerParameters, stdio_client

    res, d, reg, runs, pinned, log_file, profile, cmd, env, say, t0 = lay_out(case, host, base_dir)

    say(f"$ {' '.join(cmd)}")
    PROC.set({})
    exit_code = None
    try:
        with anyio.fail_after(CASE_TIMEOUT_S), open(d / "host.stderr", "w") as errlog:
            params = StdioServerParameters(command=cmd[0], args=cmd[1:], cwd=str(d), env=env or None)
            async with stdio_client(params, errlog=errlog) as (r, w):
                await play_script(r, w, case, res, say, runs, reg)
    except Exception as e:  # noqa: BLE001 - a host that broke the session is a failure, named
        session_broke(res, say, e)
    p = PROC.get().get("p")
    if p is not None:
        for _ in range(500):
            if p.returncode is not None:
                break
            await anyio.sleep(0.02)
        exit_code = p.returncode
    return finish_case(case, res, d, reg, runs, log_file, pinned, profile, exit_code, say, t0, keep)


async def play_script(r, w, case, res, say, runs, reg):
    """The case's client script in one MCP session over the streams `r`, `w` (either transport)."""
    import anyio
    from mcp import ClientSession, MCPError
    from mcp import types

    async with ClientSession(r, w, read_timeout_seconds=INITIALIZE_TIMEOUT_S, client_info=types.Implementation(name=CLIENT_NAME, version="1.0.0")) as s:
        places = {"runs": str(runs), "registry": str(reg)}
        await run_script(s, case, res, MCPError, anyio, case.get("refused"), say, places)


def session_broke(res, say, e):
    """The session ended by an exception: a failure, unless the host had just refused the run."""
    msg = describe(e)
    if not getattr(res, "_ended_by_refusal", False):
        res.fail(f"the session with the host broke: {msg}")
    else:
        say(f"(session closed after the refusal: {msg})")


def finish_case(case, res, d, reg, runs, log_file, pinned, profile, exit_code, say, t0, keep):
    say(f"host exit code: {exit_code}")
    check_after(case, res, d, reg, runs, log_file, pinned, profile, exit_code)
    res.seconds = time.monotonic() - t0
    if res.ok and not keep:
        shutil.rmtree(d, ignore_errors=True)
    return res


def describe(e):
    subs = getattr(e, "exceptions", None)
    if subs:
        return "; ".join(describe(x) for x in subs)
    return f"{type(e).__name__}: {e}"


def text_of(r):
    return "\n".join(c.text for c in r.content if getattr(c, "type", None) == "text")


async def run_script(s, case, res, MCPError, anyio, refused_expect, say, places):
    fail = res.fail
    try:
        init = await s.initialize()
        say(f"initialize -> ok ({init.server_info.name})")
        if refused_expect is not None:
            fail(f"initialize: expected a refusal `runbook_failed` naming {refused_expect}, got a normal answer (the host served a run it must refuse)")
            tools = await s.list_tools()
            say(f"list -> {[t.name for t in tools.tools]}")
            return
    except MCPError as e:
        say(f"initialize -> error {e.code}: {e.message}")
        if refused_expect is None:
            fail(f"initialize: answered the error `{short(e.message)}`, expected the run to be admitted")
            return
        check_refusal(e.message, refused_expect, fail)
        if case.get("lint") and case["lint"] not in e.message:
            res.notes.append(f"the refusal does not name the lint finding `{case['lint']}` (HOSTS.md 3: a host SHOULD say which findings made the document invalid)")
        res._ended_by_refusal = True
        return
    fixture_tools = {t["name"] for t in server_spec(case).get("tools", [])}
    for i, step in enumerate(case.get("client", []), 1):
        op = step["op"]
        exp = step.get("expect", {})
        where = f"step {i} ({op}{' ' + step.get('tool', step.get('to', '')) if op in ('call', 'advance') else ''})"
        if op == "sleep":
            await anyio.sleep(step["ms"] / 1000)
            say(f"{where}: slept {step['ms']} ms")
            continue
        if op == "list":
            try:
                r = await s.list_tools()
            except MCPError as e:
                fail(f"{where}: tools/list answered an error: {e.message}")
                continue
            names = [t.name for t in r.tools]
            say(f"{where} -> {names}")
            seen = sorted(n for n in names if n in fixture_tools)
            if "tools" in exp and seen != sorted(exp["tools"]):
                fail(f"{where}: the client was shown the server tools {seen}, expected exactly {sorted(exp['tools'])}")
            for n in exp.get("host_tools_include", []):
                if n not in names:
                    fail(f"{where}: `{n}` is not listed (listed: {names})")
            continue
        tool, args = (step["tool"], substitute(step.get("args", {}), places)) if op == "call" else ("runbook_advance", {"to": step["to"]})
        try:
            r = await s.call_tool(tool, args, read_timeout_seconds=REQUEST_TIMEOUT_S)
        except MCPError as e:
            say(f"{where} -> protocol error {e.code}: {e.message}")
            fail(f"{where}: tools/call answered a protocol error ({e.code}: {short(e.message)}), expected a tool result")
            continue
        t = text_of(r)
        say(f"{where} -> is_error={bool(r.is_error)} text={short(t, 200)!r} structured={short(r.structured_content, 200) if r.structured_content is not None else None}")
        check_result(where, r, t, exp, fail)


def check_refusal(message, codes, fail):
    if not message.startswith("runbook_failed:"):
        fail(f"initialize: the refusal `{short(message)}` does not begin with `runbook_failed:`")
    head = message.split("\n", 1)[0]
    for c in codes:
        if not re.search(rf"(?<![a-z-]){re.escape(c)}(?![a-z-])", head):
            fail(f"initialize: the refusal `{short(head)}` does not name `{c}`")


def check_result(where, r, t, exp, fail):
    if "is_error" in exp and bool(r.is_error) != exp["is_error"]:
        fail(f"{where}: isError is {bool(r.is_error)}, expected {exp['is_error']} (text: {short(t)!r})")
    if "text" in exp and t != exp["text"]:
        fail(f"{where}: text {t!r}, expected {exp['text']!r}")
    for sub in exp.get("text_contains", []):
        if sub not in t:
            fail(f"{where}: the text does not contain `{sub}`: {short(t)!r}")
    if "structured" in exp and r.structured_content != exp["structured"]:
        fail(f"{where}: structuredContent {short(r.structured_content)}, expected {short(exp['structured'])}")


# ---------------------------------------------------------------------------------------------------
# After the client left: the server's log, the exit code, the bundle.


def read_server_log(log_file):
    if not log_file.exists():
        return None
    return [json.loads(l) for l in log_file.read_text().splitlines() if l.strip()]


def check_after(case, res, d, reg, runs, log_file, pinned, profile, exit_code):
    fail = res.fail
    exp = case["expect"]
    # What reached the server.
    log = read_server_log(log_file)
    sexp = exp.get("server", {})
    started = log is not None and any(e["event"] == "start" for e in log)
    if sexp.get("started") is False and started:
        fail("the fixture server was started; expected no server to start (refused before anything runs)")
    if sexp.get("started") is True and not started:
        fail("the fixture server was never started")
    calls = [e for e in (log or []) if e["event"] == "call"]
    want = substitute(sexp.get("calls", []), {"runs": str(runs), "registry": str(reg)})
    got = [{"tool": c["tool"], "arguments": c["arguments"]} for c in calls]
    ok = len(got) == len(want) and all(g["tool"] == w["tool"] and ("arguments" not in w or g["arguments"] == w["arguments"]) for g, w in zip(got, want))
    if not ok:
        fail(f"calls that reached the server: {short(got, 400)}; expected {short(want, 400)}")
    # The bundle.
    bexp = exp["bundle"]
    bundles = sorted(p.parent for p in runs.glob("*/run.json")) if runs.exists() else []
    receipts = sorted(runs.rglob("receipt.json")) if runs.exists() else []
    report = None
    if bexp is None:
        if bundles or receipts:
            fail(f"a run bundle or receipt was written ({', '.join(str(p.relative_to(runs)) for p in bundles + receipts)}); expected none: no run took place (docs/spec/bundle.md#the-receipt: no receipt pins a document the host refused to resolve)")
    elif not bundles and bexp.get("optional"):
        pass
    elif len(bundles) != 1:
        fail(f"expected one run bundle under the runs directory, found {len(bundles)}")
    else:
        report = check_bundle(case, res, d, runs, bundles[0], pinned, profile, bexp)
    # The exit code: 0 only for a completed run (docs/spec/adapters.md#adapter-duties).
    want_code = exp.get("exit_code")
    if want_code is None:
        outcome = (bexp or {}).get("report", {}).get("outcome")
        want_code = 0 if outcome == "completed" else 1
    if exit_code not in (want_code if isinstance(want_code, list) else [want_code]):
        why = "docs/spec/cli.md#exit-codes: exit codes ... 1 the document/run was refused" if case.get("refused") is not None else "docs/spec/adapters.md#adapter-duties: exits 1 when the run did not complete (0 only for completed)"
        fail(f"the host exited with {exit_code}, expected {want_code} ({why})")


def mask_report(rep):
    """docs/spec/conformance.md#how-expectations-are-written: host-specific fields masked: the run id, event counts and sequence numbers (a host may
    feed `tick` events of its own clock), and the adapter's coverage (what it cannot see is its own)."""
    r = json.loads(json.dumps(rep))
    if isinstance(r.get("run_id"), str):
        r["run_id"] = "<run-id>"
    if isinstance(r.get("events"), int):
        r["events"] = "<count>"
    if isinstance(r.get("coverage"), list) and r["coverage"]:
        r["coverage"] = "<coverage>"
    for lst in (r.get("deviations"), r.get("approvals")):
        for x in lst if isinstance(lst, list) else []:
            if isinstance(x, dict) and isinstance(x.get("seq"), int):
                x["seq"] = "<seq>"
    for x in (r.get("checkpoints") or {}).values() if isinstance(r.get("checkpoints"), dict) else []:
        if isinstance(x, dict) and isinstance(x.get("seq"), int):
            x["seq"] = "<seq>"
    return r


_ENVELOPES = {}


def envelope_sha256(doc):
    key = sha256(doc)
    if key not in _ENVELOPES:
        p = subprocess.run([runbook_host(), "envelope", "-"], input=doc, capture_output=True)
        _ENVELOPES[key] = sha256(p.stdout) if p.returncode == 0 else None
    return _ENVELOPES[key]


def expected_report(case, pinned, profile):
    ref = case["reference"]
    doc = pinned.get(ref)
    rid, ver = ref.split("@", 1)
    base = {
        "schema": REPORT_SCHEMA,
        "run_id": "<run-id>",
        "document": {"runbook_id": rid, "sha256": sha256(doc) if doc is not None else None, "version": ver},
        "envelope_sha256": envelope_sha256(doc) if doc is not None else None,
        "profile": profile,
        "coverage": "<coverage>",
        "events": "<count>",
        "approvals": [],
        "refusals": [],
        "deviations": [],
    }
    base.update(case["expect"]["bundle"].get("report", {}))
    return base


def pointer(doc, ptr):
    cur = doc
    for part in ptr.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, list):
            cur = cur[int(part)] if part.isdigit() and int(part) < len(cur) else KeyError
        elif isinstance(cur, dict):
            cur = cur.get(part, KeyError)
        else:
            return KeyError
        if cur is KeyError:
            return KeyError
    return cur


def check_pointers(name, value, wanted, doc, fail):
    """`{pointer: value}` checks on a bundle file; `<document-sha256>` and `<envelope-sha256>` stand for
    the digests of the pinned bytes and of their canonical envelope."""
    for ptr, want in wanted.items():
        if doc is not None and isinstance(want, str):
            want = {"<document-sha256>": sha256(doc), "<envelope-sha256>": envelope_sha256(doc)}.get(want, want)
        got = pointer(value, ptr) if value is not None else KeyError
        if got != want:
            fail(f"{name}: {ptr} is {short(got) if got is not KeyError else 'absent'}, expected {short(want)}")


def check_bundle(case, res, d, runs, bdir, pinned, profile, bexp):
    fail = res.fail
    run_id = bdir.name
    files = {p.name for p in bdir.iterdir() if p.is_file()}
    doc = pinned.get(case["reference"])
    for f in ("run.json", "events.ndjson", "report.json", "receipt.json"):
        if f not in files:
            fail(f"bundle: `{f}` is missing (docs/spec/bundle.md#layout: run.json, the document, envelope.json, events.ndjson, report.json, receipt.json)")
    doc_files = [f for f in ("runbook.json", "runbook.yaml") if f in files]
    if len(doc_files) != 1:
        fail(f"bundle: expected the document as runbook.json or runbook.yaml, found {doc_files}")
    elif doc is not None and (bdir / doc_files[0]).read_bytes() != doc:
        fail(f"bundle: `{doc_files[0]}` is not the pinned document's exact bytes (docs/spec/bundle.md#layout: the exact document bytes)")

    def load(name):
        try:
            return json.loads((bdir / name).read_bytes())
        except Exception as e:  # noqa: BLE001
            if name in files:
                fail(f"bundle: `{name}` is not JSON: {e}")
            return None

    runj, report, receipt = load("run.json"), load("report.json"), load("receipt.json")
    # run.json
    if isinstance(runj, dict):
        if runj.get("schema") != "runbook-run-bundle/v1" or runj.get("run_id") != run_id:
            fail(f"run.json: schema {runj.get('schema')!r} and run_id {runj.get('run_id')!r}; expected runbook-run-bundle/v1 and the directory's name `{run_id}`")
        if doc is not None and pointer(runj, "/document/sha256") != sha256(doc):
            fail(f"run.json: /document/sha256 is {pointer(runj, '/document/sha256')}, expected the sha256 of the pinned bytes {sha256(doc)}")
        check_pointers("run.json", runj, bexp.get("run", {}), doc, fail)
    if "envelope" in bexp:
        check_pointers("envelope.json", load("envelope.json"), bexp["envelope"], doc, fail)
    # events.ndjson
    lines = []
    if "events.ndjson" in files:
        for n, l in enumerate((bdir / "events.ndjson").read_text(encoding="utf-8").splitlines(), 1):
            try:
                v = json.loads(l)
                assert isinstance(v, dict) and HEX64.match(v.get("h", "")) and "event" in v and "decision" in v
                lines.append(v)
            except Exception:  # noqa: BLE001
                fail(f"events.ndjson:{n}: not a line {{h, decision, event}}")
        if lines:
            first = lines[0]["event"]
            if not (isinstance(first, dict) and first.get("type") == "start"):
                fail("events.ndjson: the first event is not the `start` claim")
            elif first.get("profile") != profile or first.get("run_id") != run_id:
                fail(f"events.ndjson: the start claim has profile {first.get('profile')!r} and run_id {first.get('run_id')!r}, expected {profile} and `{run_id}`")
        if "invokes" in bexp:
            got = [[e["event"].get("tool"), e["decision"].get("decision"), e["decision"].get("deviation")] for e in lines if isinstance(e["event"], dict) and e["event"].get("type") == "invoke"]
            if got != bexp["invokes"]:
                fail(f"events.ndjson: the invoke events and their decisions are {got}, expected {bexp['invokes']} (docs/spec/run.md#deviations: a blocked invocation is recorded, never dropped)")
    # report.json
    if isinstance(report, dict):
        if set(report) != REPORT_KEYS:
            fail(f"report.json: keys {sorted(report)} are not those of {REPORT_SCHEMA} (docs/spec/run.md: every key always present)")
        if report.get("run_id") != run_id:
            fail(f"report.json: run_id {report.get('run_id')!r} is not the bundle's `{run_id}`")
        masked = mask_report(report)
        want = expected_report(case, pinned, profile)
        for k in sorted(want):
            if want[k] == "<any>":
                continue
            if masked.get(k, KeyError) != want[k]:
                got = masked.get(k, KeyError)
                fail(f"report.json: `{k}` is {short(got) if got is not KeyError else 'absent'}, expected {short(want[k])} (masked as docs/spec/conformance.md#how-expectations-are-written says)")
    # receipt.json
    if isinstance(receipt, dict):
        check_receipt(receipt, bdir, files, lines, runj, fail)
    # latest.json and no absolute path in the bundle's metadata.
    latest = runs / "latest.json"
    if not latest.exists():
        fail("latest.json is missing from the runs directory (docs/spec/bundle.md#latest-pointer-and-history: latest.json points at the newest run)")
    else:
        try:
            lv = json.loads(latest.read_text())
            if lv.get("run_id") != run_id:
                fail(f"latest.json names run {lv.get('run_id')!r}, expected `{run_id}`")
        except ValueError:
            fail("latest.json is not JSON")
    needles = {str(d), os.path.realpath(d)}
    for p in [bdir / "run.json", bdir / "report.json", bdir / "receipt.json", latest, runs / "history.ndjson"]:
        if p.exists():
            text = p.read_text(encoding="utf-8", errors="replace")
            if any(n in text for n in needles):
                fail(f"`{p.relative_to(runs)}` holds an absolute path of this machine (docs/spec/bundle.md#relative-paths-only: no absolute path is ever written into a bundle's own metadata)")
    # runbook-host verify
    want_verify = bexp.get("verify", 0)
    v = subprocess.run([runbook_host(), "verify", "--format", "json", str(bdir)], capture_output=True, text=True)
    res.transcript.append(f"           runbook-host verify -> {v.returncode}")
    if v.returncode != want_verify:
        why = ""
        try:
            why = json.loads(v.stdout).get("failure")
        except ValueError:
            why = (v.stdout + v.stderr).strip()
        fail(f"`runbook-host verify` exited {v.returncode}, expected {want_verify}: {short(why)}")
    return report


def check_receipt(receipt, bdir, files, lines, runj, fail):
    def bad(m):
        fail(f"receipt.json: {m} (docs/spec/bundle.md#the-receipt: the receipt holds the report, its sha256, the head of the hash chain, the module's sha256, the host's name and version)")

    if receipt.get("schema") != "runbook-receipt/v1":
        bad(f"schema is {receipt.get('schema')!r}")
    rb = (bdir / "report.json").read_bytes() if "report.json" in files else b""
    if rb:
        if receipt.get("report_sha256") != sha256(rb):
            bad(f"report_sha256 {receipt.get('report_sha256')} is not the sha256 of report.json ({sha256(rb)})")
        try:
            if receipt.get("report") != json.loads(rb):
                bad("`report` is not report.json")
        except ValueError:
            pass
    head = lines[-1]["h"] if lines else (runj or {}).get("chain_h0")
    if receipt.get("chain_head") != head:
        bad(f"chain_head {receipt.get('chain_head')} is not the last link of events.ndjson ({head})")
    if not (isinstance(receipt.get("module_sha256"), str) and HEX64.match(receipt["module_sha256"])):
        bad("module_sha256 is not 64 lowercase hex digits")
    host = receipt.get("host")
    if not (isinstance(host, dict) and isinstance(host.get("name"), str) and host["name"] and isinstance(host.get("version"), str) and host["version"]):
        bad(f"host is {short(host)}, expected {{name, version}}")
    arts = receipt.get("artifacts")
    if not isinstance(arts, dict):
        bad("artifacts is missing")
        return
    for f in ["run.json", "events.ndjson", "report.json"] + [x for x in ("runbook.json", "runbook.yaml", "envelope.json") if x in files]:
        if f not in arts:
            bad(f"artifacts does not pin `{f}`")
    for f, h in arts.items():
        p = bdir / f
        if not p.is_file() or sha256(p.read_bytes()) != h:
            bad(f"artifacts pins `{f}` at {h}, which is not its sha256")


# ---------------------------------------------------------------------------------------------------
# Running hosts, printing the table.


async def run_host(host, cases, jobs, base_dir, keep, on_done):
    import anyio

    results = {}
    sem = anyio.Semaphore(jobs)

    async def one(c):
        async with sem:
            r = await play(c, host, base_dir, keep)
            results[c["id"]] = r
            on_done(r)

    async with anyio.create_task_group() as tg:
        for c in cases:
            tg.start_soon(one, c)
    return results


def failure_text(r):
    c = r.case
    lines = [f"{r.host['name']} :: {c['id']} ({c['area']}): FAILED", f"  clause: {c['clause']}"]
    lines += [f"  - {f}" for f in r.failures]
    if r.dir:
        lines.append(f"  case directory: {r.dir}" + ("" if r.dir.exists() else " (removed)"))
        err = r.dir / "host.stderr"
        if err.exists():
            tail = err.read_text(errors="replace").strip().splitlines()[-6:]
            lines += ["  host stderr (last lines):"] + [f"    {t}" for t in tail]
    lines += ["  transcript:"] + [f"    {t}" for t in r.transcript]
    return "\n".join(lines)


def print_table(cases, hosts, results, expect_fail):
    names = [h["name"] for h in hosts]
    w = max(len(c["id"]) for c in cases)
    aw = max(len(a) for a in AREAS)
    print(f"{'case':<{w}}  {'area':<{aw}}  " + "  ".join(names))
    for c in cases:
        cells = []
        for h in hosts:
            r = results.get(h["name"], {}).get(c["id"])
            if r is None:
                cell = "-"
            elif r.ok:
                cell = "pass" + (" (expected to fail)" if c["id"] in expect_fail.get(h["name"], set()) else "")
            else:
                cell = "FAIL" + (" (expected)" if c["id"] in expect_fail.get(h["name"], set()) else "")
            cells.append(f"{cell:<{len(h['name'])}}")
        print(f"{c['id']:<{w}}  {c['area']:<{aw}}  " + "  ".join(cells))


def read_expect_fail(path, hosts):
    """--expect-fail FILE: a JSON list of case ids (for every selected host) or {host: [ids]}."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, list):
        return {h["name"]: set(data) for h in hosts}
    names = {h["name"] for h in hosts}
    if set(data) <= names:
        return {k: set(v) for k, v in data.items()}
    return {h["name"]: set(data) for h in hosts}  # {case id: reason}


def host_expect_fail(host):
    ef = host.get("expect_fail")
    if ef is None:
        return None
    if isinstance(ef, str):
        ef = json.loads((ROOT / ef).read_text())
    # A list of case ids, or {case id: why it must fail}.
    return set(ef)


# ---------------------------------------------------------------------------------------------------
# The README's table, from the data.

TABLE_BEGIN = "<!-- host-cases:begin -->"
TABLE_END = "<!-- host-cases:end -->"


def md(s):
    return s.replace("|", "\\|").replace("\n", " ")


def table_markdown(cases):
    out = [TABLE_BEGIN, "<!-- produced by `bash conformance/hosts/run --table` from cases/*.json: do not edit by hand -->", ""]
    counts = {a: sum(1 for c in cases if c["area"] == a) for a in AREAS}
    out.append(f"{len(cases)} cases: " + ", ".join(f"{a} {counts[a]}" for a in AREAS) + ".")
    out.append("")
    out.append("| case | area | what it checks | clause |")
    out.append("| --- | --- | --- | --- |")
    for c in cases:
        out.append(f"| `{c['id']}` | {c['area']} | {md(c['description'])} | {md(c['clause'])} |")
    out.append("")
    out.append(TABLE_END)
    return "\n".join(out)


def write_table(cases):
    text = README.read_text(encoding="utf-8")
    if TABLE_BEGIN not in text or TABLE_END not in text:
        sys.exit(f"{README}: the markers {TABLE_BEGIN} ... {TABLE_END} are missing")
    a, rest = text.split(TABLE_BEGIN, 1)
    _, b = rest.split(TABLE_END, 1)
    new = a + table_markdown(cases) + b
    if new != text:
        README.write_text(new, encoding="utf-8")
        print(f"rewrote the case table in {README.relative_to(ROOT)} ({len(cases)} cases)")
    else:
        print(f"the case table in {README.relative_to(ROOT)} is up to date ({len(cases)} cases)")


def check_fixtures(cases):
    """Each case that says its document is invalid (`lint`) names a finding `runbook-host lint` reports."""
    bad = []
    for c in cases:
        code = c.get("lint")
        if not code:
            continue
        reg = c["registry"]["runbooks"][0]
        doc = source_bytes(reg["document"])
        p = subprocess.run([runbook_host(), "lint", "--format", "json", "-"], input=doc, capture_output=True)
        try:
            codes = [f["code"] for f in json.loads(p.stdout)["findings"] if f["severity"] == "error"]
        except (ValueError, KeyError):
            codes = []
        if code not in codes:
            bad.append(f"{c['id']}: `runbook-host lint` finds {codes} in the fixture, not `{code}`")
    return bad


def main():
    ap = argparse.ArgumentParser(description="The host conformance suite (conformance/hosts/HOSTS.md).")
    ap.add_argument("--host", action="append", default=[], help="run only this host of hosts.json (repeatable)")
    ap.add_argument("--case", action="append", default=[], help="run only this case id (repeatable)")
    ap.add_argument("--transport", action="append", choices=["stdio", "http"], help="only this transport (repeatable; default: every transport a host offers)")
    ap.add_argument("--table", action="store_true", help="rewrite the case table in README.md from the data, then exit")
    ap.add_argument("--check-cases", action="store_true", help="validate the case files and their fixtures, then exit")
    ap.add_argument("--hosts", help="another hosts file in the shape of hosts.json (default: conformance/hosts/hosts.json)")
    ap.add_argument("--expect-fail", help="JSON file: case ids that must fail (a list, or {host: [ids]})")
    ap.add_argument("--jobs", type=int, default=4, help="cases run at once per host (default 4: mostly waiting on processes)")
    ap.add_argument("--keep", action="store_true", help="keep every case directory (failed ones are always kept)")
    ap.add_argument("--verbose", action="store_true", help="print every case's transcript")
    a = ap.parse_args()

    try:
        cases = load_cases()
    except (CaseError, ValueError) as e:
        sys.exit(f"conformance/hosts: bad case data: {e}")
    if a.table:
        write_table(cases)
        return 0
    bad = check_fixtures(cases)
    if a.check_cases:
        for b in bad:
            print(b)
        print(f"{len(cases)} cases, {len(bad)} problems")
        return 1 if bad else 0
    if bad:
        sys.exit("conformance/hosts: fixtures that do not say what their case claims:\n  " + "\n  ".join(bad))
    if a.case:
        unknown = set(a.case) - {c["id"] for c in cases}
        if unknown:
            sys.exit(f"no such case: {sorted(unknown)}")
        cases = [c for c in cases if c["id"] in a.case]
    hosts = load_hosts(a.hosts, a.transport or ("stdio", "http"))
    if a.host:
        unknown = set(a.host) - {h["name"] for h in hosts} - {h.get("base") for h in hosts}
        if unknown:
            sys.exit(f"no such host in hosts.json (for the transports chosen): {sorted(unknown)}")
        hosts = [h for h in hosts if h["name"] in a.host or h.get("base") in a.host]
    expect_fail = {}
    for h in hosts:
        ef = host_expect_fail(h)
        if ef is not None:
            expect_fail[h["name"]] = ef
    if a.expect_fail:
        expect_fail.update(read_expect_fail(a.expect_fail, hosts))
    for name, ids in expect_fail.items():
        unknown = ids - {c["id"] for c in load_cases()}
        if unknown:
            sys.exit(f"{name}: expect_fail names unknown cases {sorted(unknown)}")

    import logging

    import anyio

    # The SDK warns about tools it cannot validate (a blocked call's tool is not listed): not the suite's output.
    logging.getLogger("mcp").setLevel(logging.ERROR)
    install_process_hook()
    base_dir = Path(tempfile.mkdtemp(prefix="runbook-host-conformance-"))
    results, timings, verdicts = {}, {}, {}
    any_bad = False
    for h in hosts:
        why = host_unavailable(h)
        if why:
            print(f"{h['name']}: unavailable: {why}", file=sys.stderr)
            verdicts[h["name"]] = f"{h['name']}: unavailable ({why})"
            any_bad = True
            continue
        done = []

        def on_done(r, done=done, total=len(cases)):
            done.append(r)
            if a.verbose:
                print(f"[{len(done)}/{total}] {r.host['name']} {r.case['id']}: {'pass' if r.ok else 'FAIL'} ({r.seconds:.1f} s)", file=sys.stderr)

        t0 = time.monotonic()
        results[h["name"]] = anyio.run(run_host, h, cases, a.jobs, base_dir, a.keep, on_done)
        timings[h["name"]] = time.monotonic() - t0
    print_table(cases, [h for h in hosts if h["name"] in results], results, expect_fail)
    print()
    for h in hosts:
        name = h["name"]
        if name not in results:
            print(verdicts[name])
            continue
        rs = results[name]
        failed = {cid for cid, r in rs.items() if not r.ok}
        passed = len(rs) - len(failed)
        notes = sum(len(r.notes) for r in rs.values())
        line = f"{name}: {passed} passed, {len(failed)} failed ({timings[name]:.1f} s, {a.jobs} at a time)"
        if notes:
            line += f"; {notes} note(s) on SHOULDs (below)"
        ef = expect_fail.get(name)
        if ef is not None:
            ef = ef & set(rs)
            unexpected, missing = failed - ef, ef - failed
            unnamed = [cid for cid in failed & ef if not rs[cid].failures or not CLAUSE_CITES.search(rs[cid].case["clause"])]
            if not unexpected and not missing and not unnamed:
                line += f"; self-test passed: exactly the {len(ef)} expected cases failed, each naming its clause"
            else:
                any_bad = True
                if unexpected:
                    line += f"; UNEXPECTED failures: {sorted(unexpected)}"
                if missing:
                    line += f"; expected to fail but passed: {sorted(missing)}"
                if unnamed:
                    line += f"; failures that name no clause: {sorted(unnamed)}"
        elif failed:
            any_bad = True
        print(line)
    noted = [f"  {h['name']} :: {c['id']}: {n}" for h in hosts for c in cases for n in getattr(results.get(h["name"], {}).get(c["id"]), "notes", [])]
    if noted:
        print()
        print("Notes (HOSTS.md's SHOULDs, not failures):")
        print("\n".join(noted))
    shown = []
    for h in hosts:
        for c in cases:
            r = results.get(h["name"], {}).get(c["id"])
            if r is None:
                continue
            expected = c["id"] in expect_fail.get(h["name"], set())
            if not r.ok and (not expected or a.verbose):
                shown.append(failure_text(r))
            elif not r.ok:
                why = (h.get("expect_fail") or {}).get(c["id"]) if isinstance(h.get("expect_fail"), dict) else None
                shown.append(f"{h['name']} :: {c['id']}: failed as expected{' (' + why + ')' if why else ''}; clause: {c['clause']}\n  - {r.failures[0]}")
            elif a.verbose:
                shown.append(f"{h['name']} :: {c['id']}: pass\n" + "\n".join(f"    {t}" for t in r.transcript))
    if shown:
        print()
        print("\n\n".join(shown))
    if not a.keep:
        # A case that failed as expected leaves nothing behind; an unexpected failure keeps its directory.
        for name, rs in results.items():
            for cid, r in rs.items():
                if not r.ok and cid in expect_fail.get(name, set()) and r.dir:
                    shutil.rmtree(r.dir, ignore_errors=True)
        if not any(base_dir.iterdir()):
            base_dir.rmdir()
    return 1 if any_bad else 0


if __name__ == "__main__":
    sys.exit(main())
