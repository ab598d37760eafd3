"""The loader, :class:`Policy` (the loaded component) and :class:`Session` (one run in the module)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from importlib import resources
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import wasmtime
import wasmtime.component as wc

from . import _wasm
from ._types import (
    Advance,
    Approval,
    Blind,
    ComponentMismatch,
    Decision,
    DecisionKind,
    Deviation,
    Effect,
    EffectOp,
    End,
    EndReason,
    Event,
    FinalOutput,
    Finding,
    InvalidDocument,
    Invoke,
    LintReport,
    ModuleTrap,
    Outcome,
    PolicyError,
    Phase,
    Profile,
    Reason,
    Recorded,
    Refusal,
    Replayed,
    Result,
    Risk,
    RunState,
    RunTampered,
    Severity,
    SignedAnswer,
    SnapshotRefused,
    Start,
    Structure,
    Tick,
    Verdict,
    Verification,
    _Complete,
)

#: The sha256 of the component this package ships (``runbook-host module --sha256`` of the same build).
#: ``load()`` refuses any other bytes unless the caller names their sha256 itself.
COMPONENT_SHA256 = "410a26cd6ed00dd53a0f992bde5eb476d8a6a219dbc9118a57b5c27b7b1fc92c"

#: Fuel for one call into the component: far above what the module's own limits let a call use (the
#: Rust host's value), so it only turns a runaway into a trap, never changes an answer.
FUEL_PER_CALL = 20_000_000_000
#: The most linear memory one instance may grow to (the Rust host's value).
MEMORY_CAP = 1 << 30
MAX_WASM_STACK = 1 << 20

Document = Union[bytes, bytearray, memoryview]

# Compiling the component takes most of a second: one engine and one compiled component per sha256 and
# process, shared by every Policy of it (each Policy still has its own stores and instances).
_COMPILED: Dict[str, Tuple[wasmtime.Engine, wc.Component, wc.Linker]] = {}
_COMPILED_LOCK = threading.Lock()


def _is_hex64(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def load(path: Union[str, "os.PathLike[str]", None] = None, sha256: Optional[str] = None, *, fuel: int = FUEL_PER_CALL, memory_cap: int = MEMORY_CAP) -> "Policy":
    """Loads the policy component and checks its bytes first.

    Without arguments: the component this package ships, checked against :data:`COMPONENT_SHA256`.
    ``path`` loads another file; it must still have :data:`COMPONENT_SHA256` unless ``sha256`` names the
    hash the caller expects (the conformance runner does that with a freshly built component). Bytes whose
    sha256 differs are refused with :class:`ComponentMismatch`, naming both hashes. ``fuel`` and
    ``memory_cap`` are backstops per call and per instance (a run that hits one halts with a trap).
    """
    if path is None:
        where = "the bundled component (runbook_policy/policy.wasm)"
        try:
            data = resources.files(__package__).joinpath("policy.wasm").read_bytes()
        except OSError as e:
            raise ComponentMismatch(f"{where} cannot be read: {e}", expected=COMPONENT_SHA256, actual="") from None
    else:
        where = os.fspath(path)
        with open(where, "rb") as f:
            data = f.read()
    expected = (sha256 or COMPONENT_SHA256).strip().lower()
    if not _is_hex64(expected):
        raise ValueError(f"sha256 must be 64 hex digits, not {sha256!r}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        source = "the sha256 given to load()" if sha256 else f"the sha256 runbook_policy was built with ({_package_version()})"
        raise ComponentMismatch(
            f"refusing the component {where}: its sha256 is {actual}, but {source} is {expected}",
            expected=expected,
            actual=actual,
        )
    if not isinstance(fuel, int) or fuel <= 0 or not isinstance(memory_cap, int) or memory_cap <= 0:
        raise ValueError("fuel and memory_cap must be positive integers")
    return Policy._compiled(data, actual, fuel, memory_cap)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return "runbook-policy " + version("runbook-policy")
    except Exception:  # noqa: BLE001 - only for a message
        return "runbook-policy"


# ---- values in and out -------------------------------------------------------------------------------------


def json_text(value: Any, what: str = "value") -> str:
    """A JSON-able value as compact JSON text (the module canonicalizes it). Refuses what JSON cannot hold
    exactly: NaN and infinities, keys that are not strings (``json`` would turn ``1`` into ``"1"``), and
    anything ``json`` cannot encode. Raises ``TypeError`` or ``ValueError`` naming ``what``."""
    _check_keys(value, what, 0)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to be JSON") from None
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what} is not JSON: {e}") from None


def _check_keys(v: Any, what: str, depth: int) -> None:
    if depth > 200:
        raise ValueError(f"{what} is nested deeper than 200 levels")
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"{what} is not JSON: a key of type {type(k).__name__} ({k!r}); JSON keys are strings")
            if isinstance(x, (dict, list, tuple)):
                _check_keys(x, what, depth + 1)
    elif isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, (dict, list, tuple)):
                _check_keys(x, what, depth + 1)


def _code(enum: Any, value: Any, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        codes = ", ".join(m.value for m in enum)
        raise ValueError(f"{what} must be one of {codes}, not {value!r}") from None


def _opt_str(v: Any, what: str) -> Optional[str]:
    if v is not None and not isinstance(v, str):
        raise TypeError(f"{what} must be a string or None, not {type(v).__name__}")
    return v


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a string, not {type(v).__name__}")
    return v


def _str_list(v: Any, what: str) -> List[str]:
    if isinstance(v, str) or not all(isinstance(x, str) for x in v):
        raise TypeError(f"{what} must be a list of strings")
    return list(v)


def lower_event(event: Event, at: int) -> Any:
    """The WIT ``event`` record for a typed event at ``at`` (milliseconds since the run began)."""
    if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at < 1 << 64:
        raise ValueError(f"`at` must be an integer from 0 to 2^64-1 (milliseconds since the run began), not {at!r}")
    r = _wasm.record
    v = _wasm.variant
    if isinstance(event, Invoke):
        kind = v("invoke", r(**{
            "tool": _str(event.tool, "Invoke.tool"),
            "arguments": json_text(event.arguments, "Invoke.arguments"),
            "call-id": _opt_str(event.call_id, "Invoke.call_id"),
            "step": _opt_str(event.step, "Invoke.step"),
            "guard": bool(event.guard),
        }))
    elif isinstance(event, Result):
        kind = v("result", r(**{
            "tool": _str(event.tool, "Result.tool"),
            "result": json_text(event.result, "Result.result"),
            "is-error": bool(event.is_error),
            "call-id": _opt_str(event.call_id, "Result.call_id"),
        }))
    elif isinstance(event, Start):
        cov = event.coverage
        if isinstance(cov, _Complete):
            coverage = None  # wasmtime-py lowers the payload-less case of this variant from None
        elif isinstance(cov, Blind):
            coverage = list(cov.what)
        else:
            raise TypeError("Start.coverage must be rp.COMPLETE or rp.Blind([...])")
        kind = v("start", r(**{
            "run-id": _str(event.run_id, "Start.run_id"),
            "profile": _code(Profile, event.profile, "Start.profile").value.lower(),
            "allowlist": _str_list(event.allowlist, "Start.allowlist"),
            "risk-ceiling": _code(Risk, event.risk_ceiling, "Start.risk_ceiling").value,
            "coverage": coverage,
            "agent": _str(event.agent, "Start.agent"),
            "available": None if event.available is None else _str_list(event.available, "Start.available"),
        }))
    elif isinstance(event, Approval):
        kind = v("approval", r(**{
            "step": _opt_str(event.step, "Approval.step"),
            "call-sha256": _opt_str(event.call_sha256, "Approval.call_sha256"),
            "approver": _str(event.approver, "Approval.approver"),
            "granted": bool(event.granted),
            "request": None if event.request is None else int(event.request),
        }))
    elif isinstance(event, Advance):
        kind = v("advance", _str(event.step, "Advance.step"))
    elif isinstance(event, Verdict):
        kind = v("verdict", r(**{"step": _str(event.step, "Verdict.step"), "pass": bool(event.passed), "by": _str(event.by, "Verdict.by")}))
    elif isinstance(event, FinalOutput):
        kind = v("final-output")
    elif isinstance(event, Tick):
        kind = v("tick")
    elif isinstance(event, End):
        kind = v("end", _code(EndReason, event.reason, "End.reason").value)
    else:
        raise TypeError(f"not an event: {type(event).__name__} (Start, Invoke, Result, Approval, Advance, Verdict, FinalOutput, Tick or End)")
    return r(at=at, kind=kind)


def _finding(f: Any) -> Finding:
    return Finding(code=f.code, severity=Severity(f.severity), line=f.line, column=f.column, pointer=f.pointer, message=f.message)


def _decision(d: Any) -> Decision:
    return Decision(
        seq=d.seq,
        kind=DecisionKind(d.kind),
        step=d.step,
        deviation=None if d.deviation is None else Deviation(d.deviation),
        reason=None if d.reason is None else Reason(d.reason),
        refusals=[Refusal(x) for x in d.refusals],
    )


def _state(s: Any) -> RunState:
    g = s.__dict__
    return RunState(
        phase=Phase(g["phase"]),
        step=g["step"],
        at_terminal=g["at-terminal"],
        scope=list(g["scope"]),
        scope_tools=list(g["scope-tools"]),
        gated=g["gated"],
        approved=g["approved"],
        call_approvals=g["call-approvals"],
        awaiting_verdict=g["awaiting-verdict"],
        outcome=None if g["outcome"] is None else Outcome(g["outcome"]),
        events=g["events"],
        next_deadline=g["next-deadline"],
        approval_requests=[(r.__dict__["seq"], r.__dict__["call-sha256"]) for r in g["approval-requests"]],
    )


def _recorded(r: Any) -> Recorded:
    g = r.__dict__
    return Recorded(
        event_line=g["event-line"],
        decision=_decision(g["decision"]),
        decision_line=g["decision-line"],
        link=g["link"],
        explanation=g["explanation"],
        state=_state(g["state"]),
        record_line=g["record-line"],
    )


def _effects(r: Any) -> List[Effect]:
    """A lifted ``result<list<effect>, string>`` (bare: a list is the effects, a str the module's reason;
    tagged by other wasmtime-py versions)."""
    if isinstance(r, wc.Variant):
        if r.tag != "ok":
            raise ValueError(str(r.payload))
        r = r.payload
    if isinstance(r, str):
        raise ValueError(r)  # the module's text names the fact and what is wrong with it
    return [Effect(op=EffectOp(e.op), path=e.path, bytes=bytes(e.bytes)) for e in r]


def _bundle_item(name: Any, item: Any) -> Tuple[str, Any]:
    """One ``(name, bundle-item)``: bytes are a file, an int a directory's entry count, None anything else
    (wasmtime-py lowers this variant bare, by the payload's type)."""
    _str(name, "an entry's name")
    if isinstance(item, (bytes, bytearray, memoryview)):
        return name, bytes(item)
    if item is None or (isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 1 << 32):
        return name, item
    raise TypeError(f"the entry {name!r} must be bytes (a file), an int from 0 to 2^32-1 (a directory's entry count) or None, not {item!r:.60}")


def _verification(v: Any) -> Verification:
    g = v.__dict__
    return Verification(
        checks=list(g["checks"]),
        failure=None if g["failure"] is None else (g["failure"][0], g["failure"][1]),
        run_id=g["run-id"],
        outcome=g["outcome"],
        events=g["events"],
        reasons=[(c, m) for c, m in g["reasons"]],
        warnings=list(g["warnings"]),
        redacted=g["redacted"],
        shadow=g["shadow"],
        signed_answers=[
            SignedAnswer(place=a.place, principal=a.principal, message=a.message, signature=a.signature, fingerprint=a.fingerprint)
            for a in g["signed-answers"]
        ],
        receipt_signed=g["receipt-signed"],
    )


def _facts(facts: Any, what: str) -> str:
    """Facts as JSON text: text as given, anything else encoded (:func:`json_text`)."""
    return facts if isinstance(facts, str) else json_text(facts, what)


def _u64(v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
        raise ValueError(f"{what} must be an integer from 0 to 2^64-1, not {v!r}")
    return v


def _document(doc: Any) -> bytes:
    if isinstance(doc, bytes):
        return doc
    if isinstance(doc, (bytearray, memoryview)):
        return bytes(doc)
    raise TypeError(
        f"a document is its exact bytes, not {type(doc).__name__} (read the file with open(path, 'rb').read(), or encode text as UTF-8)"
    )


def _prev(prev: Any) -> str:
    if not isinstance(prev, str) or not _is_hex64(prev):
        raise ValueError(f"`prev` must be the previous chain link, 64 lowercase hex digits, not {prev!r}")
    return prev


# ---- the policy --------------------------------------------------------------------------------------------


def _cache_dir() -> Optional[str]:
    """Where compiled code is kept between processes: $RUNBOOK_POLICY_CACHE (empty: no cache), else
    $XDG_CACHE_HOME/runbook-policy-python, else ~/.cache/runbook-policy-python. Compiled code is trusted code
    (deserializing it runs it unchecked), so the directory is made private to its user (0700)."""
    env = os.environ.get("RUNBOOK_POLICY_CACHE")
    if env is not None:
        return env or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "runbook-policy-python")


def _not_own(path: str, st: os.stat_result, sticky_ok: bool) -> Optional[str]:
    """Why ``path`` is not this user's own (owned by it or root, writable by no one else), or None."""
    import stat as _stat

    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to uid {st.st_uid}, not to this user"
    sticky = _stat.S_ISDIR(st.st_mode) and st.st_mode & _stat.S_ISVTX
    if st.st_mode & 0o022 and not (sticky_ok and sticky):
        return f"{path} is writable by other users (mode {st.st_mode & 0o7777:o})"
    return None


def _private_dir(where: str) -> Optional[str]:
    """Why the cache directory ``where`` may not hold code this process runs: it, or a directory above it
    (a sticky one such as /tmp aside), is another user's or writable by others. None when it is private."""
    p = os.path.abspath(where)
    first = True
    while True:
        try:
            why = _not_own(p, os.stat(p), sticky_ok=not first)
            first = False
            if why:
                return why
        except FileNotFoundError:
            first = False
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def _read_own(path: str, limit: int) -> bytes:
    """A cache file's bytes, only when it is this user's own and a regular file (no symbolic link)."""
    import stat as _stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        why = _not_own(path, st, sticky_ok=False) or (None if _stat.S_ISREG(st.st_mode) else f"{path} is not a regular file")
        if why:
            raise PermissionError(why)
        if st.st_size > limit:
            raise PermissionError(f"{path} is larger than {limit} bytes")
        return f.read(limit + 1)


def _precompiled(engine: wasmtime.Engine, data: bytes, sha: str) -> wc.Component:
    """The component compiled for ``engine``: read from the cache when an earlier process compiled these
    bytes with this wasmtime and these settings (about 3 s of Cranelift saved per process), else compiled and
    written there (atomically). Compiled code is machine code this process runs, so a cached file is used
    only from a directory and a file that are this user's own and only when its bytes hash to the digest
    written beside it (``<key>.cwasm.sha256``; issue 28, F10): a planted or altered file is compiled over. A
    cache that cannot be read or written is only slower, never wrong."""
    try:
        import importlib.metadata

        runtime = importlib.metadata.version("wasmtime")
    except Exception:  # noqa: BLE001 - no version, no cache
        runtime = None
    where = _cache_dir() if runtime else None
    if where and _private_dir(where):
        where = None  # another user could write it: neither read nor written
    path = None
    if where:
        key = hashlib.sha256(f"{sha}|wasmtime {runtime}|nan-canonicalization|fuel|stack {MAX_WASM_STACK}|{os.uname().machine}".encode()).hexdigest()
        path = os.path.join(where, f"{key}.cwasm")
        try:
            code = _read_own(path, 256 << 20)
            if _read_own(path + ".sha256", 64).decode() == hashlib.sha256(code).hexdigest():
                return wc.Component.deserialize(engine, code)
        except Exception:  # noqa: BLE001 - absent, altered, another's or unreadable: compile instead
            pass
    try:
        component = wc.Component(engine, data)
    except _wasm.TRAPS as e:
        raise ModuleTrap(f"the component does not compile: {_wasm.trap_message(e)}") from None
    if path:
        try:
            os.makedirs(where, mode=0o700, exist_ok=True)
            code = component.serialize()
            for target, content in ((path, code), (path + ".sha256", hashlib.sha256(code).hexdigest().encode())):
                tmp = f"{target}.{os.getpid()}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(content)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
        except OSError:
            pass
    return component


class Policy:
    """The loaded component. Make one with :func:`load`; it is cheap to keep for the process.

    Stateless calls (lint, envelope, hashes, explanations) share one instance of the component; each
    :class:`Session` has an instance of its own. A Policy and its sessions are not thread-safe: use one per
    thread, or a lock.
    """

    _engine: wasmtime.Engine
    _component: wc.Component
    _linker: wc.Linker
    _fuel: int
    _memory_cap: int
    _util: Optional[_wasm.Instance]

    def __init__(self) -> None:
        raise TypeError("use runbook_policy.load() to make a Policy")

    @classmethod
    def _compiled(cls, data: bytes, sha: str, fuel: int, memory_cap: int) -> "Policy":
        with _COMPILED_LOCK:
            compiled = _COMPILED.get(sha)
            if compiled is None:
                config = wasmtime.Config()
                # Determinism checklist, as in the Rust host: NaN canonicalization, fuel, capped memory; the
                # component has no imports at all.
                config.cranelift_nan_canonicalization = True
                config.consume_fuel = True
                config.max_wasm_stack = MAX_WASM_STACK
                engine = wasmtime.Engine(config)
                component = _precompiled(engine, data, sha)
                compiled = (engine, component, wc.Linker(engine))
                _COMPILED[sha] = compiled
        p: Policy = cls.__new__(cls)
        p._engine, p._component, p._linker = compiled
        p._fuel = fuel
        p._memory_cap = memory_cap
        p._util = None
        p.module_sha256 = sha
        return p

    module_sha256: str
    """The hex sha256 of the component's bytes (checked at load)."""

    def _instance(self) -> _wasm.Instance:
        try:
            return _wasm.Instance(self._engine, self._linker, self._component, self._fuel, self._memory_cap)
        except _wasm.TRAPS as e:
            raise ModuleTrap(f"the component cannot be instantiated: {_wasm.trap_message(e)}") from None

    def _call(self, name: str, *args: Any) -> Any:
        util = self._util
        if util is None:
            util = self._util = self._instance()
        try:
            return util.call(name, *args)
        except _wasm.TRAPS as e:
            # A trapped instance is never entered again: the next call gets a fresh one.
            self._util = None
            raise ModuleTrap(f"the policy module trapped in `{name}`: {_wasm.trap_message(e)}") from None

    def lint(self, document: Document) -> LintReport:
        """Parses and lints a document (JSON or YAML bytes)."""
        r = self._call("lint", _document(document))
        return LintReport(
            sha256=r.sha256,
            findings=[_finding(f) for f in r.findings],
            structure=None if r.structure is None else Structure(r.structure.upper()),
            ok=r.ok,
        )

    def envelope(self, document: Document) -> str:
        """The ``runbook-policy-envelope/v1`` as canonical JSON text; raises :class:`InvalidDocument` with
        the findings that prevent deriving it."""
        r = self._call("envelope", _document(document))
        # result<string, list<finding>> lifts bare: a str is the envelope, a list the findings.
        if isinstance(r, str):
            return r
        raise InvalidDocument([_finding(f) for f in r])

    def call_sha256(self, tool: str, arguments: Any) -> str:
        """The hex SHA-256 of canonical ``{"arguments":..,"tool":..}``: what an approval bound to this one
        call names (docs/spec/run.md#approvals-bound-to-a-call). ``arguments`` is a JSON-able value."""
        ok, v = _wasm.unwrap_result(self._call("call-sha256", _str(tool, "tool"), json_text(arguments, "arguments")))
        if not ok:
            raise ValueError(f"the call cannot be hashed: {v}")
        return v

    def canonicalize(self, text: str) -> str:
        """The RFC 8785 canonical form of JSON text; ``ValueError`` when it is not JSON the module accepts."""
        ok, v = _wasm.unwrap_result(self._call("canonicalize", _str(text, "text")))
        if not ok:
            raise ValueError(f"not canonicalizable: {v}")
        return v

    def encode_event(self, event: Event, at: int) -> str:
        """The canonical event line a typed event stands for (what hosts record)."""
        ok, v = _wasm.unwrap_result(self._call("encode-event", lower_event(event, at)))
        if not ok:
            raise ValueError(f"the event is malformed: {v}")
        return v

    def chain_link(self, prev: str, event_line: str, decision_line: str, digested: bool = False) -> str:
        """The hash-chain link of docs/spec/bundle.md#the-hash-chain for one recorded line, from the previous link."""
        return self._call("chain-link", _prev(prev), _str(event_line, "event_line"), _str(decision_line, "decision_line"), bool(digested))

    def explain(self, kind: str, code: str) -> Optional[str]:
        """One sentence explaining a wire code of a kind (``decision``, ``deviation``, ``reason``,
        ``refusal``, ``outcome``, ``profile``, ``risk``, ``end-reason``, ``lint``); None for an unknown code."""
        return self._call("explain", _str(kind, "kind"), str(code))

    def version(self) -> str:
        """The module's own version (the guest crate's)."""
        return self._call("version")

    def prose(self, document: Document) -> Optional[str]:
        """The document's prose as canonical JSON (never a decision input); None when it does not parse."""
        return self._call("prose", _document(document))

    def session(self, document: Document) -> "Session":
        """A new supervised run of ``document``: feed the ``Start`` claim first."""
        return Session._new(self, _document(document))

    # ---- run bundles (docs/spec/bundle.md and docs/spec/README.md#architecture): the module composes every byte, a host carries out the effects ----

    def bundle_create(self, document: Document, facts: Any) -> List[Effect]:
        """The effects that create a new run's bundle: ``<run_id>/`` with the document's bytes, its
        envelope, an empty ``events.ndjson`` and ``run.json``, ``latest.json`` and the ``created`` line of
        ``history.ndjson``. ``facts`` (JSON text or a JSON-able dict): ``{run_id, at, reference, trust,
        pinned_sha256?, provenance?, module_sha256, host: {name, version}, adapter, git (from
        :meth:`git_state`), shadow?, receipt_key?}``; every ``at`` is Unix milliseconds. ``ValueError``
        names the fact that is missing or wrong."""
        return _effects(self._call("bundle-create", _document(document), _facts(facts, "facts")))

    def bundle_change(self, manifest: str, change: Any) -> List[Effect]:
        """The effects of one change to ``run.json`` (``manifest``: its text as last written):
        ``{"lifecycle": "admitted"|"refused", "at", "start"?}``, ``{"approvals_signed": sha256}``,
        ``{"receipt_key": {key_id, public_key}}`` or ``{"shadow": true}``."""
        return _effects(self._call("bundle-change", _str(manifest, "manifest"), _facts(change, "change")))

    def bundle_end(self, manifest: str, report: Optional[str], facts: Any) -> List[Effect]:
        """The effects that end a run: ``report.json``, ``run.json``, ``receipt.json`` (and a ``sign``
        effect when run.json names a receipt key), ``latest.json`` when it still names this run, and the
        ``ended`` history line. Without a report, ``facts["ended_without_report"]`` names why. ``facts``:
        ``{at, chain_head, hashes: {file: sha256}, latest?: <latest.json's text>, ended_without_report?}``."""
        return _effects(
            self._call("bundle-end", _str(manifest, "manifest"), _opt_str(report, "report"), _facts(facts, "facts"))
        )

    def verify_bundle(self, entries: Sequence[Tuple[str, Any]], module_sha256: str, signers_sha256: Optional[str] = None) -> Verification:
        """Every consistency check of a run bundle, in the module, stopping at the first failure (WIT
        ``verify-bundle``). ``entries``: every top-level entry of the bundle directory as ``(name, item)``,
        ``item`` being a regular file's bytes, a directory's entry count (int) or None (anything else, a
        symbolic link: never read). ``module_sha256``: the sha256 of the module that replays the bundle (the
        receipt must name it; :attr:`module_sha256`); ``signers_sha256``: that of the allowed signers the
        verifier trusts. The signature bytes of ``signed_answers`` are left to the caller:
        :func:`runbook_policy.verify` reads a directory and fails such a bundle closed."""
        items = [_bundle_item(*e) for e in entries]
        return _verification(self._call("verify-bundle", items, _str(module_sha256, "module_sha256"), _opt_str(signers_sha256, "signers_sha256")))

    def record_line(self, link: str, event_line: str, decision_line: str) -> str:
        """The ``events.ndjson`` record of an event line and its decision line (newline included)."""
        return self._call("record-line", _str(link, "link"), _str(event_line, "event_line"), _str(decision_line, "decision_line"))

    def signature_line(self, seq: int, request: int, channel_id: str, message: str, signature: str, principal: str, fingerprint: str) -> str:
        """A line of ``signatures.ndjson``: one signed answer to one approval request."""
        return self._call(
            "signature-line", _u64(seq, "seq"), _u64(request, "request"), _str(channel_id, "channel_id"), _str(message, "message"),
            _str(signature, "signature"), _str(principal, "principal"), _str(fingerprint, "fingerprint"),
        )

    def shadow_line(self, seq: int, tool: str, call_sha256: str, decision: str) -> str:
        """A line of ``shadow.ndjson``: a call of a shadow run forwarded although the module did not allow it."""
        return self._call("shadow-line", _u64(seq, "seq"), _str(tool, "tool"), _str(call_sha256, "call_sha256"), _str(decision, "decision"))

    def traffic_line(self, prev: str, entry: Any) -> Tuple[str, str]:
        """A line of ``traffic.ndjson`` and its link (docs/spec/adapters.md#mcp-beyond-tools): MCP traffic besides tool calls that a
        proxy passed on. ``prev`` is the previous line's link (``run.json``'s ``chain_h0`` for the first);
        ``entry`` a JSON-able ``{n, at, direction, server, method, params, answer | error_code}``. The line
        holds digests, never the content; ``ValueError`` names a malformed entry."""
        # result<tuple<string, string>, string>: wasmtime-py lifts the two cases to a tuple and a str.
        v = self._call("traffic-line", _str(prev, "prev"), json_text(entry, "entry"))
        if isinstance(v, str):
            raise ValueError(f"not a traffic entry: {v}")
        return (v[0], v[1])

    def guard_names(self, tool: str, arguments: Any, needles: Sequence[str]) -> bool:
        """The guard's matching rule (docs/spec/run.md#guarded-calls): whether the tool name or any string of the arguments
        (a JSON-able value; object keys included) contains one of ``needles``."""
        return self._call("guard-names", _str(tool, "tool"), json_text(arguments, "arguments"), _str_list(list(needles), "needles"))

    def git_state(self, exit_code: Optional[int], porcelain: bytes) -> str:
        """The working directory's git state as counts only (compact JSON, ``bundle_create``'s ``git``), from
        the exit code of ``git status --porcelain=v1 -z`` (None: it did not run or finish) and its output."""
        if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool) or not -(1 << 31) <= exit_code < 1 << 31):
            raise ValueError(f"exit_code must be a 32-bit integer or None, not {exit_code!r}")
        if not isinstance(porcelain, (bytes, bytearray, memoryview)):
            raise TypeError(f"porcelain must be git's output as bytes, not {type(porcelain).__name__}")
        return self._call("git-state", exit_code, bytes(porcelain))


class Session:
    """One supervised run of one document, in an instance of its own.

    Feed every event, the :class:`Start` claim first, with its ``at`` (milliseconds since the run began,
    never decreasing). If the module traps, this session is unusable: that call and every later one raise
    :class:`ModuleTrap` (a host records the run as halted with ``host-trap``).
    """

    _policy: Policy
    _inst: Optional[_wasm.Instance]
    _handle: Any
    _trapped: Optional[str]

    def __init__(self) -> None:
        raise TypeError("use policy.session(document) or Session.restore(policy, document, snapshot)")

    @classmethod
    def _new(cls, policy: Policy, document: bytes) -> "Session":
        inst = policy._instance()
        try:
            handle = inst.call("[constructor]session", document)
        except _wasm.TRAPS as e:
            raise ModuleTrap(f"the policy module trapped making a session: {_wasm.trap_message(e)}") from None
        return cls._wrap(policy, inst, handle)

    @classmethod
    def _wrap(cls, policy: Policy, inst: _wasm.Instance, handle: Any) -> "Session":
        s: Session = cls.__new__(cls)
        s._policy = policy
        s._inst = inst
        s._handle = handle
        s._trapped = None
        return s

    @classmethod
    def restore(cls, policy: Policy, document: Document, snapshot: str) -> "Session":
        """A session of ``document`` in the state ``snapshot`` describes (from :meth:`snapshot`), in a fresh
        instance: it answers every later event, and reports, exactly as the snapshotted one would. Raises
        :class:`SnapshotRefused` with the module's reason for text that is not a snapshot it wrote for
        these exact bytes. Restore only a snapshot kept out of the agent's reach (the module checks its
        form, not its history)."""
        inst = policy._instance()
        try:
            r = inst.call("[static]session.restore", _document(document), _str(snapshot, "snapshot"))
        except _wasm.TRAPS as e:
            raise ModuleTrap(f"the policy module trapped restoring a session: {_wasm.trap_message(e)}") from None
        # result<session, string> lifts bare (a resource or a str), or tagged by other wasmtime-py versions.
        if isinstance(r, wc.Variant):
            if r.tag != "ok":
                raise SnapshotRefused(str(r.payload))
            r = r.payload
        if isinstance(r, str):
            raise SnapshotRefused(r)
        return cls._wrap(policy, inst, r)

    def _call(self, name: str, *args: Any) -> Any:
        inst = self._inst
        if inst is None:
            raise PolicyError("the session is closed")
        if self._trapped is not None:
            raise ModuleTrap(f"the session is unusable: the policy module trapped earlier ({self._trapped})")
        try:
            return inst.call(name, self._handle, *args)
        except _wasm.TRAPS as e:
            self._trapped = f"in `{name}`: {_wasm.trap_message(e)}"
            raise ModuleTrap(f"the policy module trapped {self._trapped}") from None

    @property
    def trapped(self) -> Optional[str]:
        """Why the session is unusable (the first trap), or None."""
        return self._trapped

    def handle(self, event: Event, at: int) -> Decision:
        """The typed path: one event in, one decision out."""
        return _decision(self._call("[method]session.handle", lower_event(event, at)))

    def feed(self, event: Event, at: int, prev: str) -> Recorded:
        """The typed path with the record: the canonical event line, the decision and its line, the chain
        link from ``prev`` (the previous link, or the chain's ``h0`` for the ``Start``), a sentence and the
        state, in one call into the module."""
        return _recorded(self._call("[method]session.feed", lower_event(event, at), _prev(prev)))

    def handle_line(self, line: str) -> str:
        """The wire path: one event line in, one canonical decision line out (a malformed line halts)."""
        return self._call("[method]session.handle-line", _str(line, "line"))

    def feed_line(self, line: str, prev: str) -> Recorded:
        """The wire path with the record; the recorded event line is ``line`` exactly (newline stripped)."""
        return _recorded(self._call("[method]session.feed-line", _str(line, "line"), _prev(prev)))

    def replay_line(self, line: str, prev: str) -> Tuple[str, str]:
        """The replay path: a recorded event line and the previous link in; its decision line and link out."""
        d, link = self._call("[method]session.replay-line", _str(line, "line"), _prev(prev))
        return d, link

    def replay_events(self, events: bytes, prev: str) -> Replayed:
        """The resume path: every record of ``events.ndjson`` (its bytes) replayed into this new session from
        ``prev`` (the chain's ``h0``), each checked by the module (its one allowed form, its link, its
        decision). A record that does not check out raises :class:`RunTampered` naming the line
        (``events.ndjson:N``) and why; the session is then unusable."""
        if not isinstance(events, (bytes, bytearray, memoryview)):
            raise TypeError(f"events are the bytes of events.ndjson, not {type(events).__name__}")
        r = self._call("[method]session.replay-events", bytes(events), _prev(prev))
        # result<replayed, tuple<string, string>> lifts bare (a record or a tuple), or tagged by other versions.
        if isinstance(r, wc.Variant):
            r = r.payload if r.tag == "ok" else tuple(r.payload)
        if isinstance(r, tuple):
            raise RunTampered(r[0], r[1])
        g = r.__dict__
        return Replayed(head=g["head"], events=g["events"], last_at=g["last-at"])

    def chain_start(self, run_json: str, pin: Optional[Tuple[str, str]] = None) -> str:
        """The resume path's first check, before :meth:`replay_events`: that ``run_json`` (run.json's text) is a
        run of this session's document (its ``document.sha256`` and its ``chain_h0``, derived by the module)
        and, with ``pin`` (``(document_sha256, chain_h0)`` kept when the run began), the pinned one. Returns
        the chain's ``h0``; raises :class:`RunTampered` naming the file and why."""
        if not isinstance(run_json, str):
            raise TypeError(f"run_json is run.json's text, not {type(run_json).__name__}")
        if pin is not None and (isinstance(pin, str) or len(pin) != 2 or not all(isinstance(x, str) for x in pin)):
            raise TypeError("`pin` must be (document_sha256, chain_h0)")
        r = self._call("[method]session.chain-start", run_json, None if pin is None else tuple(pin))
        # result<string, tuple<string, string>> lifts bare (a str or a tuple), or tagged by other versions.
        if isinstance(r, wc.Variant):
            r = r.payload if r.tag == "ok" else tuple(r.payload)
        if isinstance(r, tuple):
            raise RunTampered(r[0], r[1])
        return r

    def state(self) -> RunState:
        return _state(self._call("[method]session.state"))

    def set_guard(self, needles: Sequence[str]) -> None:
        """The guard's needles (docs/spec/run.md#guarded-calls): what names the run's evidence, its approval channel, the
        registry or the host, in every form the host knows them. A typed ``Invoke`` (:meth:`feed`,
        :meth:`handle`) whose tool name or any string of whose arguments, keys included, contains one is fed
        as ``guard: true``. Host configuration, not run state: set it again after :meth:`restore`."""
        self._call("[method]session.set-guard", _str_list(list(needles), "needles"))

    def report(self) -> str:
        """The ``runbook-run-report/v1`` as canonical JSON; final once the run has ended."""
        return self._call("[method]session.report")

    def visible_tools(self, offered: Sequence[str], whole_allowlist: bool = False) -> List[str]:
        """Which of ``offered`` (the tools behind an adapter, in their order) a client may see now: the
        module's rule (none once over; every declared tool at R0 or with ``whole_allowlist``; else the step's)."""
        return list(self._call("[method]session.visible-tools", _str_list(list(offered), "offered"), bool(whole_allowlist)))

    def leaving(self, calls_in_flight: int, last_call_timed_out: bool) -> Tuple[EndReason, bool]:
        """How the run ends when its client leaves (docs/spec/adapters.md#adapter-duties): the end reason, and whether ``final_output``
        is fed first."""
        g = self._call("[method]session.leaving", int(calls_in_flight), bool(last_call_timed_out)).__dict__
        return EndReason(g["reason"]), bool(g["final-output"])

    def exit_code(self, shadow: bool = False) -> int:
        """The exit code of a process that ran this run: 0 only when it completed, 3 for a shadow run, else 1."""
        return int(self._call("[method]session.exit-code", bool(shadow)))

    def status(self) -> str:
        """The current step, what is in scope and what awaits a human, as canonical JSON."""
        return self._call("[method]session.status")

    def is_over(self) -> bool:
        """True once the run has halted or ended (and after a trap)."""
        if self._trapped is not None:
            return True
        return self._call("[method]session.is-over")

    def snapshot(self) -> str:
        """The session's whole state as canonical JSON (``runbook-session-snapshot/v1``), for
        :meth:`restore` in another process."""
        return self._call("[method]session.snapshot")

    def close(self) -> None:
        """Frees the session's instance now (it is freed with the object otherwise)."""
        inst, self._inst = self._inst, None
        if inst is not None and self._trapped is None:
            try:
                inst.store.set_fuel(inst.fuel)
                self._handle.drop(inst.store)
            except _wasm.TRAPS:
                pass  # the instance goes away with its store anyway

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
