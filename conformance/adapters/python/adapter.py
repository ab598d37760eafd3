#!/usr/bin/env python3
"""Conformance adapter: the runbook policy component run by wasmtime-py.

Speaks the protocol of conformance/PROTOCOL.md: one JSON request a line on standard input, one JSON
response a line on standard output, in order; logs go to standard error. It exits when standard input
closes.

The component is the file that `runbook-host module --out` wrote. Before anything else the adapter checks
its sha256 against the expected value and refuses to start (exit 1) when they differ.

Environment:
  RUNBOOK_POLICY_WASM    the component (default: conformance/build/policy.wasm in this checkout)
  RUNBOOK_POLICY_SHA256  the expected hex sha256 (default: the first word of `<wasm>.sha256`, which
                         conformance/setup writes from `runbook-host module --sha256`)
  RUNBOOK_POLICY_FUEL    fuel per call (default 20_000_000_000, the Rust host's); a small value makes
                         the module run out, which is how the trap path is tested

wasmtime-py's component API has no bindgen: exports are reached by name, inside the exported
interface instance, and the `session` resource by its component names (`[constructor]session`,
`[method]session.handle-line`, `[static]session.restore`, ...). Every request gets a fresh store and
instance (as the Rust host gives every document call; a replay split by a snapshot restores in a second
one), with fuel and a memory cap as a backstop, so a trap cannot leak into the next request.
"""

import base64
import binascii
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import wasmtime
import wasmtime.component as wc

IMPLEMENTATION = "python-wasmtime"
INTERFACE = "runbook:policy/policy@1.1.0"
# The same backstops as the Rust host (host/src/lib.rs): fuel per call, memory cap, wasm stack.
FUEL_PER_CALL = 20_000_000_000
MEMORY_CAP = 1 << 30
MAX_WASM_STACK = 1 << 20

STRUCTURE = {"p0": "P0", "p1": "P1", "p2": "P2"}


def log(msg):
    print(f"{IMPLEMENTATION}: {msg}", file=sys.stderr, flush=True)


def fail_start(msg):
    log(msg)
    sys.exit(1)


class AdapterError(Exception):
    """A request the adapter cannot serve: answered with `ok: false`."""


class Trapped(Exception):
    """The module trapped (or ran out of a host bound) during a call."""


def trap_message(e):
    """Wasmtime's error text is a backtrace, then `Caused by:` and the cause: the cause comes first here."""
    text = str(e).strip()
    head, sep, cause = text.partition("Caused by:")
    if not sep:
        return text
    cause = " ".join(line.strip() for line in cause.strip().splitlines() if line.strip())
    return f"{cause} ({head.strip()})"


def runtime_version():
    try:
        from importlib.metadata import version
        return version("wasmtime")
    except Exception:  # noqa: BLE001 - only for the log line
        return "?"


def load_expected_sha(wasm_path):
    env = os.environ.get("RUNBOOK_POLICY_SHA256", "").strip()
    if env:
        return env.lower()
    sha_file = Path(str(wasm_path) + ".sha256")
    try:
        words = sha_file.read_text(encoding="utf-8").split()
    except OSError as e:
        fail_start(f"no expected sha256: RUNBOOK_POLICY_SHA256 is unset and {sha_file} cannot be read ({e.strerror})")
    if not words:
        fail_start(f"no expected sha256: {sha_file} is empty")
    return words[0].lower()


class Policy:
    def __init__(self, wasm_bytes):
        config = wasmtime.Config()
        # Determinism checklist (as in the Rust host): NaN canonicalization, fuel, capped memory; no imports.
        config.cranelift_nan_canonicalization = True
        config.consume_fuel = True
        config.max_wasm_stack = MAX_WASM_STACK
        self.engine = wasmtime.Engine(config)
        self.component = wc.Component(self.engine, wasm_bytes)
        self.linker = wc.Linker(self.engine)
        self.fuel = int(os.environ.get("RUNBOOK_POLICY_FUEL") or FUEL_PER_CALL)

    def instance(self):
        """A fresh store and instance; returns a function calling an export of the interface by name."""
        store = wasmtime.Store(self.engine)
        store.set_limits(memory_size=MEMORY_CAP)
        store.set_fuel(self.fuel)
        try:
            inst = self.linker.instantiate(store, self.component)
        except (wasmtime.WasmtimeError, wasmtime.Trap) as e:
            raise Trapped(trap_message(e)) from e
        iface = inst.get_export_index(store, INTERFACE)
        if iface is None:
            raise AdapterError(f"the component does not export `{INTERFACE}`")
        funcs = {}

        def call(name, *args):
            f = funcs.get(name)
            if f is None:
                index = inst.get_export_index(store, name, iface)
                f = inst.get_func(store, index) if index is not None else None
                if f is None:
                    raise AdapterError(f"the component's `{INTERFACE}` has no function `{name}`")
                funcs[name] = f
            store.set_fuel(self.fuel)
            try:
                result = f(store, *args)
                f.post_return(store)
            except (wasmtime.WasmtimeError, wasmtime.Trap) as e:
                raise Trapped(trap_message(e)) from e
            return result

        return store, call


def finding(f):
    return {
        "code": f.code,
        "severity": f.severity,
        "line": f.line,
        "column": f.column,
        "pointer": f.pointer,
        "message": f.message,
    }


def document_bytes(req):
    doc = req.get("document")
    if not isinstance(doc, dict):
        raise AdapterError("`document` must be an object with exactly one of `text` or `base64`")
    keys = set(doc)
    if keys == {"text"}:
        text = doc["text"]
        if not isinstance(text, str):
            raise AdapterError("`document.text` must be a string")
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise AdapterError("`document.text` is not valid Unicode (a lone surrogate): send `base64`") from None
    if keys == {"base64"}:
        b64 = doc["base64"]
        if not isinstance(b64, str):
            raise AdapterError("`document.base64` must be a string")
        try:
            raw = base64.b64decode(b64.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise AdapterError("`document.base64` is not standard base64 with padding") from None
        if base64.b64encode(raw).decode("ascii") != b64:
            raise AdapterError("`document.base64` is not standard base64 with padding")
        return raw
    raise AdapterError("`document` must have exactly one of `text` or `base64`")


def event_lines(req):
    events = req.get("events")
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise AdapterError("`events` must be a list of strings")
    for i, e in enumerate(events):
        try:
            e.encode("utf-8")
        except UnicodeEncodeError:
            raise AdapterError(f"`events[{i}]` is not valid Unicode (a lone surrogate)") from None
    return events


def op_lint(policy, req):
    document = document_bytes(req)
    try:
        _, call = policy.instance()
        r = call("lint", document)
    except Trapped as t:
        return {"trap": str(t)}
    return {
        "sha256": r.sha256,
        "structure": STRUCTURE[r.structure] if r.structure is not None else None,
        "findings": [finding(f) for f in r.findings],
    }


def op_envelope(policy, req):
    document = document_bytes(req)
    try:
        _, call = policy.instance()
        r = call("envelope", document)
    except Trapped as t:
        return {"trap": str(t)}
    # result<string, list<finding>>: the two cases lift to different Python types (str / list).
    if isinstance(r, str):
        return {"envelope": r, "findings": []}
    return {"envelope": None, "findings": [finding(f) for f in r]}


def snapshot_after(req, count):
    if "snapshot_after" not in req:
        return None
    k = req["snapshot_after"]
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= count:
        raise AdapterError(f"`snapshot_after` must be an integer from 0 to {count} (the number of events), not {json.dumps(k)}")
    return k


def chain_h0(req):
    if "chain_h0" not in req:
        return None
    h0 = req["chain_h0"]
    if not isinstance(h0, str) or len(h0) != 64 or any(c not in "0123456789abcdef" for c in h0):
        raise AdapterError(f"`chain_h0` must be 64 lowercase hex digits, not {json.dumps(h0)}")
    return h0


def drop(policy, store, session):
    """Frees the resource (runs the guest's destructor)."""
    try:
        store.set_fuel(policy.fuel)
        session.drop(store)
    except (wasmtime.WasmtimeError, wasmtime.Trap) as e:
        log(f"dropping the session failed: {e}")


def op_replay(policy, req):
    """With `snapshot_after` k: the first k events go to a new session, which is snapshotted and dropped; a
    session restored from the snapshot, in a fresh store and instance (as another process would have: only
    the document and the snapshot carry over), answers the rest and gives the report.

    With `chain_h0`: every event goes in by `feed-line` with the previous link (the first with chain_h0),
    kept here, across the restore too; one link per event is answered in `links` (none after a trap)."""
    document = document_bytes(req)
    events = event_lines(req)
    k = snapshot_after(req, len(events))
    h0 = chain_h0(req)
    split = len(events) if k is None else k
    decisions = []
    extra = {}
    if h0 is not None:
        extra["links"] = []
    prev = h0

    def feed(call, session, line):
        nonlocal prev
        if h0 is None:
            return call("[method]session.handle-line", session, line)
        r = call("[method]session.feed-line", session, line, prev)
        prev = r.link
        extra["links"].append(r.link)
        return getattr(r, "decision-line")

    try:
        store, call = policy.instance()
        session = call("[constructor]session", document)
        for line in events[:split]:
            decisions.append(feed(call, session, line))
        if k is not None:
            snapshot = call("[method]session.snapshot", session)
            extra["snapshot"] = snapshot
            drop(policy, store, session)
            store, call = policy.instance()
            r = call("[static]session.restore", document, snapshot)
            # result<session, string>: the cases lift to different Python types (a resource / str).
            if isinstance(r, wc.Variant):
                r = r.payload if r.tag == "ok" else str(r.payload)
            if isinstance(r, str):
                return {"decisions": decisions, "report": None, **extra, "restore_error": r}
            session = r
        for line in events[split:]:
            decisions.append(feed(call, session, line))
        report = call("[method]session.report", session)
    except Trapped as t:
        # The store, and the session in it, are dropped with this request: a trapped instance is not reentered.
        return {"decisions": decisions, "trap": str(t), **extra}
    drop(policy, store, session)
    return {"decisions": decisions, "report": report, **extra}


def main():
    default_wasm = Path(__file__).resolve().parent.parent.parent / "build" / "policy.wasm"
    wasm_path = Path(os.environ.get("RUNBOOK_POLICY_WASM") or default_wasm)
    try:
        wasm = wasm_path.read_bytes()
    except OSError as e:
        fail_start(f"cannot read the component {wasm_path}: {e.strerror} (run conformance/setup)")
    expected = load_expected_sha(wasm_path)
    actual = hashlib.sha256(wasm).hexdigest()
    if actual != expected:
        fail_start(f"refusing to start: {wasm_path} has sha256 {actual}, expected {expected}")

    t0 = time.perf_counter()
    try:
        policy = Policy(wasm)
        policy.instance()  # proves it instantiates (no imports) before the first request
    except (wasmtime.WasmtimeError, wasmtime.Trap, Trapped, AdapterError, ValueError) as e:
        fail_start(f"cannot load the component: {e}")
    log(f"wasmtime-py {runtime_version()}, module {actual}, compiled in {(time.perf_counter() - t0) * 1000:.0f} ms")

    out = sys.stdout.buffer
    ops = {
        "hello": lambda _req: {"implementation": IMPLEMENTATION, "module_sha256": actual},
        "lint": lambda req: op_lint(policy, req),
        "envelope": lambda req: op_envelope(policy, req),
        "replay": lambda req: op_replay(policy, req),
    }
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        rid = None
        try:
            try:
                req = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise AdapterError(f"the request is not a JSON line: {e}") from None
            if not isinstance(req, dict):
                raise AdapterError("the request is not a JSON object")
            rid = req.get("id") if isinstance(req.get("id"), str) else None
            if rid is None:
                raise AdapterError("the request has no string `id`")
            op = ops.get(req.get("op")) if isinstance(req.get("op"), str) else None
            if op is None:
                raise AdapterError(f"unknown op {json.dumps(req.get('op'))}")
            response = {"id": rid, "ok": True, "result": op(req)}
        except AdapterError as e:
            response = {"id": rid, "ok": False, "error": str(e)}
        except Exception as e:  # noqa: BLE001 - the adapter answers every request, whatever happens
            response = {"id": rid, "ok": False, "error": f"adapter failure: {type(e).__name__}: {e}"}
        out.write(json.dumps(response, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
