"""The typed vocabulary of the policy module (wit/policy.wit, package runbook:policy@1.2.0).

Enums are ``str`` enums whose values are the wire codes of docs/spec/run.md#decision-lines, so a member compares equal
to its code (``DecisionKind.NEEDS_APPROVAL == "needs-approval"``) and serializes as it. Records are frozen
dataclasses. Events are what a host feeds; everything else is what the module answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union


class _Code(str, Enum):
    """A wire code: ``str(member)`` and ``f"{member}"`` are the code itself."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Severity(_Code):
    ERROR = "error"
    WARNING = "warning"


class Structure(_Code):
    """The structure level a document reaches (docs/spec/runbook.md#structure-level): reported, never declared."""

    P0 = "P0"
    P1 = "P1"
    P2 = "P2"


class Profile(_Code):
    """The runtime profile a client claims (docs/spec/run.md#the-start-claim)."""

    R0 = "R0"
    R1 = "R1"
    R2 = "R2"


class Risk(_Code):
    READ_ONLY = "read-only"
    MUTATING = "mutating"
    DESTRUCTIVE = "destructive"
    IRREVERSIBLE = "irreversible"


class DecisionKind(_Code):
    ALLOW = "allow"
    DENY = "deny"
    NEEDS_APPROVAL = "needs-approval"
    NEEDS_VERDICT = "needs-verdict"
    HALT = "halt"


class Deviation(_Code):
    UNDECLARED_TOOL = "undeclared-tool"
    OUT_OF_SCOPE_TOOL = "out-of-scope-tool"
    OUT_OF_ORDER_STEP = "out-of-order-step"
    BUDGET_EXHAUSTED = "budget-exhausted"
    TERMINAL_NOT_REACHED = "terminal-not-reached"


class Reason(_Code):
    """Reason codes of decisions (the WIT enum is the one place the list is extended)."""

    REFUSED = "refused"
    AWAITING_APPROVAL = "awaiting-approval"
    GUARDED = "guarded"
    LIMIT = "limit"
    HALTED = "halted"
    ASSERT_FAILED = "assert-failed"
    BUDGET_EXHAUSTED = "budget-exhausted"
    ORPHAN_RESULT = "orphan-result"
    SELF_APPROVAL = "self-approval"
    NOT_CURRENT = "not-current"
    UNKNOWN_STEP = "unknown-step"
    NO_PENDING = "no-pending"
    OUT_OF_ORDER_STEP = "out-of-order-step"
    NOT_R1 = "not-r1"
    CHECKPOINT_TIMEOUT = "checkpoint-timeout"
    RUN_ENDED = "run-ended"
    MALFORMED_EVENT = "malformed-event"
    HOST_TRAP = "host-trap"
    INEXACT_NUMBER = "inexact-number"


class Refusal(_Code):
    AUTONOMOUS_AT_R0 = "autonomous-at-r0"
    CAPABILITY_NOT_ALLOWED = "capability-not-allowed"
    COVERAGE_INCOMPLETE = "coverage-incomplete"
    INVALID_DOCUMENT = "invalid-document"
    PREREQUISITE_UNMET = "prerequisite-unmet"
    PROFILE_TOO_LOW = "profile-too-low"
    RISK_ABOVE_CEILING = "risk-above-ceiling"


class Outcome(_Code):
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    REFUSED = "refused"
    FAILED = "failed"
    ABORTED = "aborted"


class EndReason(_Code):
    NORMAL = "normal"
    CLIENT_CLOSED = "client-closed"
    SERVER_EXITED = "server-exited"
    INTERRUPTED = "interrupted"
    APPROVAL_TIMEOUT = "approval-timeout"


class Phase(_Code):
    NEW = "new"
    RUNNING = "running"
    OVER = "over"


class EffectOp(_Code):
    """What a host does with one :class:`Effect` of a bundle change (docs/spec/README.md#architecture)."""

    CREATE_DIR = "create-dir"
    """Create the directory (a new run's); an existing one is an error."""
    WRITE = "write"
    """Replace the file atomically (a temporary file, fsync, rename)."""
    APPEND = "append"
    """Append the bytes as one whole record and fsync (creating the file when missing)."""
    SIGN = "sign"
    """Sign the bytes (an in-toto Statement) with the host's receipt key; write the DSSE envelope."""


# ---- coverage --------------------------------------------------------------------------------------------


class _Complete:
    """The adapter sees every tool invocation (``rp.COMPLETE``)."""

    _instance: Optional["_Complete"] = None

    def __new__(cls) -> "_Complete":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "COMPLETE"

    def __reduce__(self) -> str:
        return "COMPLETE"


COMPLETE = _Complete()


@dataclass(frozen=True)
class Blind:
    """What the adapter cannot see, e.g. ``Blind(["shell"])``: the run's coverage is incomplete, so the
    module refuses destructive or irreversible work under it (docs/spec/run.md#admission-and-refusals, ``coverage-incomplete``)."""

    what: List[str]

    def __post_init__(self) -> None:
        what = list(self.what) if not isinstance(self.what, str) else None
        if what is None or not what or not all(isinstance(w, str) and w for w in what):
            raise ValueError("Blind(...) takes a non-empty list of non-empty strings (what the adapter cannot see)")
        object.__setattr__(self, "what", what)


Coverage = Union[_Complete, Blind]


# ---- events ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """The ``start`` claim, the first event of every run (docs/spec/run.md#the-start-claim, admission)."""

    run_id: str
    profile: Union[Profile, str]
    allowlist: Sequence[str]
    risk_ceiling: Union[Risk, str]
    coverage: Coverage
    agent: str
    available: Optional[Sequence[str]] = None


@dataclass(frozen=True)
class Invoke:
    """A tool call. ``arguments`` is any JSON-able value; ``guard`` marks a call that names the run
    directory, the registry or the host binary (docs/spec/runbook.md#tight-conditions; a :class:`Run` sets it itself)."""

    tool: str
    arguments: Any
    call_id: Optional[str] = None
    step: Optional[str] = None
    guard: bool = False


@dataclass(frozen=True)
class Result:
    """A tool's result (any JSON-able value), paired with its call by ``call_id`` (docs/spec/run.md#calls-and-results)."""

    tool: str
    result: Any
    is_error: bool = False
    call_id: Optional[str] = None


@dataclass(frozen=True)
class Approval:
    """A human's answer for a gated step; with ``call_sha256``, for that one call (docs/spec/run.md#approvals-bound-to-a-call)."""

    approver: str
    granted: bool
    step: Optional[str] = None
    call_sha256: Optional[str] = None
    request: Optional[int] = None
    """The request answered: the ``seq`` of the module's ``needs-approval`` decision (its approval ledger)."""


@dataclass(frozen=True)
class Advance:
    """R1: the client routes the run to ``step``."""

    step: str


@dataclass(frozen=True)
class Verdict:
    """A human's ruling on an unevaluable step."""

    step: str
    passed: bool
    by: str


@dataclass(frozen=True)
class FinalOutput:
    """The model gave its final answer."""


@dataclass(frozen=True)
class Tick:
    """Time passed (checkpoint deadlines)."""


@dataclass(frozen=True)
class End:
    """The run ends, for ``reason``."""

    reason: Union[EndReason, str] = EndReason.NORMAL


Event = Union[Start, Invoke, Result, Approval, Advance, Verdict, FinalOutput, Tick, End]


# ---- answers ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A lint finding: 1-based line and column (column in Unicode scalar values), a JSON Pointer."""

    code: str
    severity: Severity
    line: int
    column: int
    pointer: str
    message: str

    def to_json(self) -> Dict[str, Any]:
        """The finding as `runbook-host lint --format json` prints it."""
        return {
            "code": self.code,
            "severity": self.severity.value,
            "line": self.line,
            "column": self.column,
            "pointer": self.pointer,
            "message": self.message,
        }


@dataclass(frozen=True)
class LintReport:
    sha256: str
    """Hex SHA-256 of the document's exact bytes."""
    findings: List[Finding]
    """Sorted by line, column, code."""
    structure: Optional[Structure]
    """None when the document did not parse."""
    ok: bool
    """True when no finding is an error."""


@dataclass(frozen=True)
class Decision:
    """The module's decision on one event (docs/spec/run.md#decision-lines)."""

    seq: int
    kind: DecisionKind
    step: Optional[str]
    deviation: Optional[Deviation]
    reason: Optional[Reason]
    refusals: List[Refusal] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return self.kind is DecisionKind.ALLOW


@dataclass(frozen=True)
class RunState:
    """What a host may act on between events (the WIT's ``run-state``)."""

    phase: Phase
    step: Optional[str]
    """The current step or terminal."""
    at_terminal: bool
    scope: List[str]
    """Capability names in scope now, sorted."""
    scope_tools: List[str]
    """The tools of those capabilities, sorted, without duplicates."""
    gated: bool
    approved: bool
    call_approvals: int
    awaiting_verdict: bool
    outcome: Optional[Outcome]
    """Set once the run is over."""
    events: int
    next_deadline: Optional[int]
    """The earliest ``at`` at which a pending checkpoint times out (feed a ``Tick`` then); None when none."""
    approval_requests: List[Tuple[int, str]] = field(default_factory=list)
    """The module's approval ledger: ``(seq, call_sha256)`` of each request of this visit not yet answered."""


@dataclass(frozen=True)
class Recorded:
    """One event as a host records it, from one call into the module: the event line to write, the
    decision and its canonical line, the hash-chain link (docs/spec/bundle.md#the-hash-chain), a sentence, and the state after."""

    event_line: str
    decision: Decision
    decision_line: str
    link: str
    explanation: str
    state: RunState
    record_line: str
    """The whole ``events.ndjson`` record of this event, newline included: what a host appends."""


@dataclass(frozen=True)
class Replayed:
    """What :meth:`Session.replay_events` established: the chain's head after the last record, how many
    events were replayed and the last one's ``at``."""

    head: str
    events: int
    last_at: int


@dataclass(frozen=True)
class Effect:
    """One file operation of a run bundle, composed by the module (``bundle-create``, ``bundle-change``,
    ``bundle-end``): a host carries the effects out in order and stops at the first that fails. ``path`` is
    relative to the runs root (``latest.json``, ``history.ndjson``, ``<run-id>/run.json``)."""

    op: EffectOp
    path: str
    bytes: bytes


@dataclass(frozen=True)
class SignedAnswer:
    """A signed answer whose payload the module checked (docs/spec/run.md#approvals-bound-to-a-call): the signature bytes are the host's
    to check, by the key the signature carries (whose fingerprint must be ``fingerprint``)."""

    place: str
    principal: str
    message: str
    signature: str
    fingerprint: str


@dataclass(frozen=True)
class Verification:
    """What the module's ``verify-bundle`` found about a run bundle (the WIT's ``verification``)."""

    checks: List[str] = field(default_factory=list)
    """The checks that passed, in order (``layout``, ``files-present``, ..., ``receipt``)."""
    failure: Optional[Tuple[str, str]] = None
    """The first check that failed: its place (a file, ``events.ndjson:N``) and one sentence."""
    run_id: Optional[str] = None
    outcome: Optional[str] = None
    events: int = 0
    reasons: List[Tuple[str, str]] = field(default_factory=list)
    """Why a verified bundle is not share-ready: (code, sentence)."""
    warnings: List[str] = field(default_factory=list)
    redacted: bool = False
    """A redacted derivative: its chain and receipt verified, its events not replayed."""
    shadow: Optional[int] = None
    """A shadow run: how many calls the module did not allow ran anyway."""
    signed_answers: List[SignedAnswer] = field(default_factory=list)
    """The signed answers whose payloads passed, whose signatures are still to be checked."""
    receipt_signed: bool = False
    """The receipt is signed (``receipt.dsse.json``, or ``run.json`` says so): that signature is still to be
    checked."""

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return self.failure is None


# ---- errors ----------------------------------------------------------------------------------------------


class PolicyError(Exception):
    """Every error this package raises on purpose. ``code`` names the fault (as the JS package's)."""

    code = "policy-error"


class ComponentMismatch(PolicyError):
    """The component's bytes are not the ones this package was built with (their sha256 differs)."""

    code = "component-mismatch"

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class InvalidDocument(PolicyError):
    """The document has errors that prevent deriving its envelope; ``findings`` says which, where."""

    code = "invalid-document"

    def __init__(self, findings: List[Finding]) -> None:
        self.findings = list(findings)
        errors = [f for f in self.findings if f.severity is Severity.ERROR] or self.findings
        shown = "; ".join(f"{f.line}:{f.column} {f.code}: {f.message}" for f in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"the document has no envelope: {shown}{more}" if shown else "the document has no envelope")


class SnapshotRefused(PolicyError):
    """The module refused a snapshot: not one it wrote for these exact document bytes. ``reason`` is the
    module's own text (it names the field, a JSON Pointer)."""

    code = "snapshot-refused"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the snapshot is refused: {reason}")
        self.reason = reason


class ModuleTrap(PolicyError):
    """The component trapped or ran out of a host bound (fuel, memory). The session it happened in is
    unusable from then on: every later call raises this again (fail closed)."""

    code = "module-trap"


class RunBroken(PolicyError):
    """A :class:`Run` cannot go on: its evidence could not be written (or read, to resume it), or the module
    trapped. The call that broke it and every later one raise this; an adapter blocks the tool call it was
    deciding."""

    code = "run-broken"


class RunTampered(PolicyError):
    """The recorded evidence does not check out (edited, truncated, forged, another document): ``place``
    names where (``events.ndjson:N``, ``run.json``, the document's file) and ``reason`` says why."""

    code = "run-tampered"

    def __init__(self, place: str, reason: str, run_id: Optional[str] = None) -> None:
        super().__init__(f"{f'run {run_id}: ' if run_id else ''}{place}: {reason}")
        self.place = place
        self.reason = reason
