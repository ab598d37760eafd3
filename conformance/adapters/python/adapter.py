#!/usr/bin/env python3
"""Conformance adapter: the runbook policy component through the `runbook_policy` package (packages/python),
so the suite tests what users install.

Speaks the protocol of conformance/PROTOCOL.md: one JSON request a line on standard input, one JSON
response a line on standard output, in order; logs go to standard error. It exits when standard input
closes.

The component is the file that `runbook-host module --out` wrote, loaded with `runbook_policy.load(path,
sha256)`: the package checks its sha256 against the expected value first and the adapter refuses to start
(exit 1) when they differ. Only the package's public API is used; it has no wasmtime glue of its own.

Environment:
  RUNBOOK_POLICY_WASM    the component (default: conformance/build/policy.wasm in this checkout)
  RUNBOOK_POLICY_SHA256  the expected hex sha256 (default: the first word of `<wasm>.sha256`, which
                         conformance/setup writes from `runbook-host module --sha256`)
  RUNBOOK_POLICY_FUEL    fuel per call (default: the package's, 20_000_000_000, the Rust host's); a small
                         value makes the module run out, which is how the trap path is tested

Each replay runs in a session of its own (the package gives every session a fresh store and instance; a
replay split by a snapshot restores in a second one), so a trap cannot leak into the next request; the
stateless calls (lint, envelope) share the policy's instance, which the package replaces after a trap.
"""

import base64
import binascii
import json
import os
import sys
import time
from pathlib import Path

IMPLEMENTATION = "python-wasmtime"


def log(msg):
    print(f"{IMPLEMENTATION}: {msg}", file=sys.stderr, flush=True)


def fail_start(msg):
    log(msg)
    sys.exit(1)


try:
    import runbook_policy as rp
except ImportError as e:
    fail_start(f"the runbook_policy package is not installed in this interpreter ({e}); run conformance/setup")


class AdapterError(Exception):
    """A request the adapter cannot serve: answered with `ok: false`."""


def runtime_version():
    try:
        from importlib.metadata import version

        return f"runbook-policy {version('runbook-policy')}, wasmtime-py {version('wasmtime')}"
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


def finding(f):
    return f.to_json()


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
        r = policy.lint(document)
    except rp.ModuleTrap as t:
        return {"trap": str(t)}
    return {
        "sha256": r.sha256,
        "structure": None if r.structure is None else r.structure.value,
        "findings": [finding(f) for f in r.findings],
    }


def op_envelope(policy, req):
    document = document_bytes(req)
    try:
        return {"envelope": policy.envelope(document), "findings": []}
    except rp.InvalidDocument as e:
        return {"envelope": None, "findings": [finding(f) for f in e.findings]}
    except rp.ModuleTrap as t:
        return {"trap": str(t)}


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


def op_replay(policy, req):
    """With `snapshot_after` k: the first k events go to a new session, which is snapshotted and closed; a
    session restored from the snapshot (`Session.restore`, in a fresh instance: only the document and the
    snapshot carry over, as another process would have) answers the rest and gives the report.

    With `chain_h0`: every event goes in by `feed_line` with the previous link (the first with chain_h0),
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

    def feed(session, line):
        nonlocal prev
        if h0 is None:
            return session.handle_line(line)
        r = session.feed_line(line, prev)
        prev = r.link
        extra["links"].append(r.link)
        return r.decision_line

    session = None
    try:
        session = policy.session(document)
        for line in events[:split]:
            decisions.append(feed(session, line))
        if k is not None:
            snapshot = session.snapshot()
            extra["snapshot"] = snapshot
            session.close()
            try:
                session = rp.Session.restore(policy, document, snapshot)
            except rp.SnapshotRefused as e:
                session = None
                return {"decisions": decisions, "report": None, **extra, "restore_error": e.reason}
        for line in events[split:]:
            decisions.append(feed(session, line))
        report = session.report()
    except rp.ModuleTrap as t:
        # The session is unusable after a trap; it goes away with this request.
        return {"decisions": decisions, "trap": str(t), **extra}
    finally:
        if session is not None:
            session.close()
    return {"decisions": decisions, "report": report, **extra}


def main():
    default_wasm = Path(__file__).resolve().parent.parent.parent / "build" / "policy.wasm"
    wasm_path = Path(os.environ.get("RUNBOOK_POLICY_WASM") or default_wasm)
    if not wasm_path.is_file():
        fail_start(f"cannot read the component {wasm_path}: no such file (run conformance/setup)")
    expected = load_expected_sha(wasm_path)
    fuel = int(os.environ.get("RUNBOOK_POLICY_FUEL") or rp.FUEL_PER_CALL)

    t0 = time.perf_counter()
    try:
        policy = rp.load(wasm_path, sha256=expected, fuel=fuel)
        # Proves it instantiates (no imports) and answers before the first request, with the default fuel:
        # a small RUNBOOK_POLICY_FUEL is for the requests' trap path, not for starting.
        rp.load(wasm_path, sha256=expected).version()
    except rp.ComponentMismatch as e:
        fail_start(f"refusing to start: {e}")
    except (rp.PolicyError, OSError, ValueError) as e:
        fail_start(f"cannot load the component: {e}")
    actual = policy.module_sha256
    log(f"{runtime_version()}, module {actual}, loaded in {(time.perf_counter() - t0) * 1000:.0f} ms")

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
