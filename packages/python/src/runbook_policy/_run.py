"""The run driver: one supervised run of one document, as the Rust host's ``Run`` (host/src/run.rs).

A :class:`Run` owns the module session, the bundle writer, the run's clock and the guard of docs/spec/run.md#guarded-calls.
Each event is one method; each method makes one call into the module (``feed``: the canonical event
line, the decision, the chain link and a sentence come back together), records the event and its
decision durably (fsync) and only then returns an :class:`Answer`. An adapter translates its framework's
calls to these methods and the answers back, and decides nothing itself.

Fail closed: when the bundle cannot be written or the module traps, the run is broken: the call that
caused it raises :class:`RunBroken` (the adapter blocks the tool call), every later one too, and a run
whose module trapped is ended without a report (``verify`` refuses it).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _bundle
from ._policy import Document, Policy, Session, _document, lower_event
from ._types import (
    Advance,
    Approval,
    Coverage,
    Decision,
    DecisionKind,
    End,
    EndReason,
    Event,
    FinalOutput,
    Invoke,
    ModuleTrap,
    Outcome,
    Phase,
    PolicyError,
    Profile,
    Recorded,
    Result,
    Risk,
    RunBroken,
    RunState,
    RunTampered,
    Start,
    Tick,
    Verdict,
)

log = logging.getLogger("runbook_policy")

HOST_NAME = "runbook-policy-python"


def _wall_clock() -> int:
    """Unix time in milliseconds."""
    return time.time_ns() // 1_000_000


def _ms(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
        # Not a ValueError: that is an event's own fault (a malformed event), this is the host's.
        raise PolicyError(f"the run's clock must give Unix milliseconds (an integer from 0 to 2^64-1), not {v!r}")
    return v


def _unix_ms(rfc3339: str) -> int:
    """Unix milliseconds of a UTC RFC 3339 time as the module writes it (``2026-12-02T00:00:00.000Z``)."""
    t = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    return (t - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def _host_version() -> str:
    try:
        from importlib.metadata import version

        return version("runbook-policy")
    except Exception:  # noqa: BLE001 - running from a source tree
        from . import __version__

        return __version__


@dataclass(frozen=True)
class Answer:
    """The module's answer to one event, recorded before it was returned."""

    decision: Decision
    explanation: str
    """One sentence for the agent or the person reading it, written by the module."""
    state: RunState
    """The run's state after the event."""
    event_line: str
    decision_line: str
    link: str
    """The event's hash-chain link (docs/spec/bundle.md#the-hash-chain)."""
    call_sha256: Optional[str] = None
    """For a ``needs-approval`` call: the hash an approval bound to it names (docs/spec/run.md#approvals-bound-to-a-call)."""

    @property
    def kind(self) -> DecisionKind:
        return self.decision.kind

    @property
    def allowed(self) -> bool:
        return self.decision.kind is DecisionKind.ALLOW


class Guard:
    """What names the run's evidence or the host (docs/spec/run.md#guarded-calls): the needles, in every form the host knows
    them. The module applies its one matching rule to them (the session's ``set_guard``): a call whose tool
    name, or any string of whose arguments (object keys included), contains a needle is fed with
    ``guard: true``, and the module denies it (``undeclared-tool``, reason ``guarded``)."""

    def __init__(self) -> None:
        self.needles: List[str] = ["runbook-host"]

    def add_path(self, p: Union[str, "os.PathLike[str]"]) -> None:
        """Adds a path in the forms an agent may write it: as given (without a leading ``./`` or a trailing
        ``/``), resolved, and relative to the current directory when it lies under it. A form of 3
        characters or fewer would match innocent text, so it is not added."""
        given = os.fspath(p)
        while given.startswith("./"):
            given = given[2:]
        forms = [given.rstrip("/")]
        path = Path(os.fspath(p))
        resolved: Optional[Path] = None
        try:
            resolved = path.resolve(strict=True)
            forms.append(str(resolved))
        except OSError:
            pass
        absolute = [x for x in (path if path.is_absolute() else None, resolved) if x is not None]
        try:
            cwd = Path.cwd()
            bases = {cwd, cwd.resolve()}
        except OSError:
            bases = set()
        for base in bases:
            for full in absolute:
                try:
                    forms.append(str(full.relative_to(base)))
                except ValueError:
                    pass
        for f in forms:
            if len(f) > 3 and f not in self.needles:
                self.needles.append(f)

    def add_name(self, name: str) -> None:
        """Adds a literal needle (a name that is not a path)."""
        if len(name) > 3 and name not in self.needles:
            self.needles.append(name)

# ---- malformed events -------------------------------------------------------------------------------------------

#: The most characters of a malformed event's text that are recorded (the module's own limit on a line is
#: 1 MiB, beyond which it halts with reason ``limit`` instead of ``malformed-event``).
MALFORMED_MAX_CHARS = 4096

MALFORMED_PREFIX = "malformed event: "


def malformed_line(text: Any) -> str:
    """The event line :meth:`Run.feed_malformed` feeds for ``text``: one line of UTF-8, at most
    :data:`MALFORMED_MAX_CHARS` characters of the text, never a JSON object."""
    if not isinstance(text, str):
        try:
            text = repr(text)
        except Exception as e:  # noqa: BLE001 - a repr that raises still leaves a record of the event
            text = f"<{type(text).__name__} whose repr raised {type(e).__name__}>"
    # A lone surrogate cannot cross into the module: its escape stands for it.
    line = text.encode("utf-8", "backslashreplace").decode("utf-8")
    # One line, whoever reads it: every line break (\r\n, \n, \r, U+2028, ...) is a space.
    line = " ".join(line.splitlines())
    if len(line) > MALFORMED_MAX_CHARS:
        line = f"{line[:MALFORMED_MAX_CHARS]} ... ({len(line) - MALFORMED_MAX_CHARS} more characters not recorded)"
    # The module decides a line that is a JSON object as the event it may be: such a text never goes as it is.
    if re.sub(r"^[\s\ufeff]+", "", line)[:1] in ("", "{"):
        line = MALFORMED_PREFIX + line
    return line


def _unencodable(kind: str, tool: Any, error: Exception) -> str:
    """The text recorded for an event of the embedding code that cannot be encoded (arguments or a result
    that are not JSON, a tool name that is not a string)."""
    name = tool if isinstance(tool, str) else repr(tool)
    return f"malformed {kind} of tool {json.dumps(name, ensure_ascii=False)}: {type(error).__name__}: {error}"


# ---- approvals from the embedding program ---------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalRequest:
    """What an approval callback is asked: one gated call, named by its hash."""

    run_id: str
    step: Optional[str]
    tool: str
    arguments: Any
    call_sha256: str
    """The hash an approval of this one call names (docs/spec/run.md#approvals-bound-to-a-call)."""
    explanation: str


@dataclass(frozen=True)
class ApprovalAnswer:
    """A human's answer, from the embedding program (never the agent): who, and yes or no."""

    approver: str
    granted: bool


#: An approval callback: sync or async, given the request, answering an :class:`ApprovalAnswer`. It is the
#: embedding program's (a person at a terminal, a chat-ops button); the agent never reaches it.
Approver = Callable[[ApprovalRequest], Union[ApprovalAnswer, Awaitable[ApprovalAnswer]]]


@dataclass(frozen=True)
class Gated:
    """How a call that may need approval was decided (:meth:`Run.invoke_with_approval`)."""

    answer: Answer
    """The decision the call is run or blocked on (the last ``invoke`` fed for it)."""
    approval: Optional[Answer] = None
    """The module's answer to the approval fed for the call, if one was."""
    problem: Optional[str] = None
    """Why no approval was fed: no callback, it failed, timed out or answered something else."""

    @property
    def allowed(self) -> bool:
        return self.answer.allowed

    @property
    def message(self) -> str:
        """Why the call is blocked, for the agent (empty when it is allowed)."""
        if self.allowed:
            return ""
        parts = [self.answer.explanation]
        if self.approval is not None:
            if self.approval.allowed:
                parts.append("a human refused to approve this call")
            else:
                parts.append(f"the approval was not accepted: {self.approval.explanation}")
        if self.problem:
            parts.append(self.problem)
        if len(parts) == 1:
            return parts[0]
        # One sentence: the module's explanation (a sentence with its full stop) and what followed, joined
        # by semicolons, with a single full stop at the end.
        return "; ".join(p.rstrip().removesuffix(".") for p in parts) + "."


# ---- the run ------------------------------------------------------------------------------------------------------


class Run:
    """One supervised run that writes the same bundle as the Rust host. Make it with :meth:`Run.create`.

    Not thread-safe: feed it from one thread (an asyncio loop is one thread).
    """

    _policy: Policy
    _bundle: _bundle.Bundle
    _session: Session
    _broken: Optional[RunBroken]
    _state: Optional[RunState]
    _guard: Guard
    _needles: List[str]
    _clock: Callable[[], int]
    _t0: int
    _last_at: int

    def __init__(self) -> None:
        raise TypeError("use Run.create(policy, document, ...) or Run.resume(policy, run_id, ...)")

    @classmethod
    def create(
        cls,
        policy: Policy,
        document: Union[Document, str, "os.PathLike[str]"],
        *,
        runs_root: Union[str, "os.PathLike[str]"] = ".runbook/runs",
        agent: str,
        profile: Union[Profile, str],
        allowlist: Sequence[str] = ("*",),
        risk_ceiling: Union[Risk, str],
        coverage: Coverage,
        reference: Optional[str] = None,
        adapter: str = "library",
        available: Optional[Sequence[str]] = None,
        run_id: Optional[str] = None,
        pinned_sha256: Optional[str] = None,
        clock: Optional[Callable[[], int]] = None,
        host: Optional[Tuple[str, str]] = None,
        git: Optional[Dict[str, Any]] = None,
    ) -> "Run":
        """Creates the bundle ``<runs_root>/<run_id>/`` and feeds the ``start`` claim (its answer is
        :attr:`start`). A refused run is a run too: its bundle is finished (outcome ``refused``) and
        :attr:`over` is true; nothing else may be fed to it.

        ``document`` is the document's bytes, or a path to read them from (a ``str`` is a path).
        ``reference`` is how the bundle names the document (a file's name by default; the module keeps a
        path's last component only); ``adapter`` names what observes the run (``library``, ``pydantic-ai``,
        ``claude-agent-sdk``). ``pinned_sha256``: the digest a registry's index pins for ``id@version``
        (trust T2 in the bundle, as the Rust host records a registry document); refused unless it is the
        document's own sha256.

        The facts every byte of the bundle is made from are measured, or fixed by the caller (tests and the
        whole-run conformance vectors, where every host must write the same bundle): ``clock``, a callable
        returning Unix milliseconds (default: the wall clock), read for the bundle's times, the run's start
        and every event's ``at`` (milliseconds since the start, never decreasing); ``run_id`` (default: a
        new random one); ``host``, the ``(name, version)`` the bundle names (default: this package's);
        ``git``, run.json's ``source.git`` (default: measured with ``git status`` in the working directory,
        counts only).
        """
        if isinstance(document, (str, os.PathLike)):
            path = Path(os.fspath(document))
            data = path.read_bytes()
            ref = reference if reference is not None else path.name
        else:
            data = _document(document)
            ref = reference if reference is not None else _bundle.file_name_for(data)
        if not isinstance(ref, str) or not ref.replace("\\", "/").strip("/"):
            raise ValueError(f"`reference` must name the document (a file name or id@version), not {ref!r}")
        run_id = run_id if run_id is not None else _bundle.new_run_id()
        if not _bundle.is_safe_name(run_id):
            raise ValueError(f"`{run_id}` is not a usable run id (letters, digits, `.`, `_`, `-`; not starting with `.`)")
        if not isinstance(adapter, str) or not adapter:
            raise ValueError("`adapter` must name the adapter")
        now = _wall_clock if clock is None else clock
        if not callable(now):
            raise TypeError("`clock` must be a callable returning Unix milliseconds")
        host_name, host_version = (HOST_NAME, _host_version()) if host is None else host
        if not isinstance(host_name, str) or not isinstance(host_version, str):
            raise TypeError("`host` must be (name, version), two strings")
        if git is not None and not isinstance(git, dict):
            raise TypeError("`git` must be the run.json `source.git` object (a dict)")
        start = Start(
            run_id=run_id,
            profile=profile,
            allowlist=list(allowlist) if not isinstance(allowlist, str) else allowlist,
            risk_ceiling=risk_ceiling,
            coverage=coverage,
            agent=agent,
            available=None if available is None else (list(available) if not isinstance(available, str) else available),
        )
        lower_event(start, 0)  # a claim that cannot be fed is the caller's error, raised before any file exists
        if pinned_sha256 is not None and pinned_sha256 != _bundle.sha256_hex(data):
            raise ValueError(f"the document's sha256 is {_bundle.sha256_hex(data)}, not the pinned {pinned_sha256}: a pinned run of other bytes is refused")
        runs = Path(os.fspath(runs_root))
        if git is None:
            # Measured before the bundle exists, so the run's own files do not count.
            git = json.loads(policy.git_state(*_bundle.git_status()))
        facts = {
            "run_id": run_id,
            "at": _ms(now()),
            "reference": ref,
            # T2: resolved from a registry whose index pins these bytes (checked above); T1: a local document.
            "trust": "T2" if pinned_sha256 else "T1",
            "pinned_sha256": pinned_sha256 or None,
            # The Rust host's provenance of a local file; a registry the embedder resolved is not known here.
            "provenance": None if pinned_sha256 else {"kind": "file", "registry": None, "from_cache": None, "signed_by": None, "signature_expires": None},
            "module_sha256": policy.module_sha256,
            "host": {"name": host_name, "version": host_version},
            "adapter": adapter,
            "git": git,
        }
        try:
            bundle = _bundle.Bundle.create(policy, runs, run_id, data, facts, lambda: _ms(now()))
        except OSError as e:
            raise RunBroken(f"cannot create the run bundle under {runs}: {e}") from None
        run: Run = cls.__new__(cls)
        run._policy = policy
        run._bundle = bundle
        run._broken = None
        run._state = None
        run._last_at = 0
        run._clock = now
        run._guard = Guard()
        run._guard.add_path(runs)
        run._guard.add_path(bundle.path)
        run._needles = []
        try:
            run._session = policy.session(data)
        except ModuleTrap as e:
            raise run._break_trapped(str(e)) from None
        run._set_guard()
        run._t0 = run._now()
        run.start = run._feed(start)
        try:
            bundle.admitted(run.start.allowed)
        except (OSError, PolicyError, ValueError) as e:
            run._end_unwritable()
            raise run._break(f"cannot record the admission: {e}") from None
        if not run.start.allowed:
            run._finish()
        return run

    @classmethod
    def resume(
        cls,
        policy: Policy,
        run_id: str,
        *,
        runs_root: Union[str, "os.PathLike[str]"] = ".runbook/runs",
        t0: Optional[int] = None,
        pin: Optional[Tuple[str, str]] = None,
        clock: Optional[Callable[[], int]] = None,
    ) -> "Run":
        """Reopens the run ``run_id`` that another process began and did not end, as the Rust host's
        ``Run::resume``: the module replays every record (its form, chain link and decision) from ``h0``,
        derived again from the document's envelope (never read from run.json), and later events go to the
        same bundle byte for byte as the first process would have written them. ``pin``: :attr:`pin`, kept
        out of the agent's reach when the run began. ``t0``: the run's wall-clock start in Unix ms, from
        which every later ``at`` counts (:attr:`t0` of the first process; default: the ``created`` time
        run.json records, a few ms earlier). Raises :class:`RunTampered` (``place``: ``events.ndjson:N``,
        ``run.json`` or the document's file), :class:`RunBroken` (unreadable), :class:`PolicyError` for a
        finished run or one whose approvals or receipt are signed (this package checks no signature)."""
        if not _bundle.is_safe_name(run_id):
            raise ValueError(f"`{run_id}` is not a usable run id")
        if pin is not None and (isinstance(pin, str) or len(pin) != 2 or not all(isinstance(x, str) for x in pin)):
            raise TypeError("`pin` must be (document_sha256, chain_h0), as Run.pin gave it")
        now = _wall_clock if clock is None else clock
        if not callable(now):
            raise TypeError("`clock` must be a callable returning Unix milliseconds")
        runs = Path(os.fspath(runs_root))
        try:
            bundle = _bundle.Bundle.open(policy, runs, run_id, lambda: _ms(now()))
        except (OSError, ValueError) as e:
            raise RunBroken(f"run {run_id} cannot be resumed: {e}") from None
        try:
            m = bundle.manifest
            if bundle.finished:
                raise PolicyError(f"run {run_id} is finished (its report is written, or it ended without one): a finished run is not resumed")
            if m.get("approvals") is not None or m.get("receipt_signature") is not None:
                raise PolicyError(f"run {run_id} has signed approvals or a signed receipt, which this package cannot check: resume it with runbook-host")
            _, doc = bundle.document()
            start = _ms(t0) if t0 is not None else _unix_ms(next(e["at"] for e in m["lifecycle"] if e["event"] == "created"))
            session = policy.session(doc)
            try:
                # The module checks that run.json (and the pin) name this document and derives h0.
                h0 = session.chain_start(bundle._manifest_text, pin)
                replayed = session.replay_events(bundle.events_bytes(), h0)
            except RunTampered as e:
                raise RunTampered(e.place, e.reason, run_id) from None
        except BaseException as e:
            bundle.close()
            if isinstance(e, OSError):
                raise RunBroken(f"run {run_id} cannot be resumed: {e}") from None
            if isinstance(e, (KeyError, TypeError, ValueError, StopIteration)):
                raise RunBroken(f"run {run_id} cannot be resumed: run.json is not of its form ({type(e).__name__}: {e})") from None
            raise
        bundle.head, bundle.lines = replayed.head, replayed.events
        run: Run = cls.__new__(cls)
        run._policy, run._bundle, run._session = policy, bundle, session
        run._broken, run._state = None, None
        run._clock, run._t0, run._last_at = now, start, replayed.last_at
        run._guard = Guard()
        run._guard.add_path(runs)
        run._guard.add_path(bundle.path)
        run._needles = []
        run._set_guard()
        return run

    start: Answer
    """The module's answer to the ``start`` claim (``halt`` with the refusals when the run was refused);
    not set on a resumed run."""

    @property
    def t0(self) -> int:
        """The run's wall-clock start (Unix ms): every ``at`` counts from here (keep it to :meth:`resume`)."""
        return self._t0

    @property
    def pin(self) -> Tuple[str, str]:
        """``(document_sha256, chain_h0)`` of this run, to keep out of the agent's reach and pass to
        :meth:`resume`: a document swapped in the bundle (with run.json edited to match) is then refused."""
        m = self._bundle.manifest
        return m["document"]["sha256"], m["chain_h0"]

    # ---- properties ----

    @property
    def run_id(self) -> str:
        return self._bundle.run_id

    @property
    def dir(self) -> Path:
        """The run's bundle directory (``<runs_root>/<run_id>``, as ``runs_root`` was given)."""
        return self._bundle.path

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def guard(self) -> Guard:
        return self._guard

    @property
    def broken(self) -> Optional[RunBroken]:
        """Why the run cannot go on, or None."""
        return self._broken

    @property
    def finished(self) -> bool:
        """Whether the bundle is finished (report and receipt written, or ended without a report)."""
        return self._bundle.finished

    @property
    def over(self) -> bool:
        """True once the run cannot admit another tool call: refused, halted, ended or broken."""
        if self._broken is not None or self._bundle.finished:
            return True
        return self._state is not None and self._state.phase is Phase.OVER

    # ---- events ----

    def invoke(self, tool: str, arguments: Any, call_id: Optional[str] = None, step: Optional[str] = None) -> Answer:
        """A tool call, decided before it runs: run it only when ``answer.allowed``. The guard (docs/spec/run.md#guarded-calls)
        is applied by the module, to the needles of :attr:`guard` (set on the session). Arguments that are
        not JSON (or a tool name that is not a string) are a malformed event: recorded
        (:meth:`feed_malformed`), and the run halts (``malformed-event``), never an allow."""
        if self._guard.needles != self._needles and self._broken is None and not self._bundle.finished:
            self._set_guard()
        try:
            # Encoding happens before the module is called: a TypeError/ValueError is the event's.
            a = self._feed(Invoke(tool=tool, arguments=arguments, call_id=call_id, step=step))
        except (TypeError, ValueError) as e:
            return self.feed_malformed(_unencodable("invoke", tool, e))
        if a.kind is DecisionKind.NEEDS_APPROVAL:
            a = Answer(a.decision, a.explanation, a.state, a.event_line, a.decision_line, a.link, self.call_sha256(tool, arguments))
        return a

    def result(self, tool: str, result: Any, is_error: bool = False, call_id: Optional[str] = None) -> Answer:
        """A tool's result (what the adapter observes, docs/spec/adapters.md#observations-per-adapter). A result that is not JSON is a malformed
        event: recorded (:meth:`feed_malformed`), and the run halts."""
        try:
            return self._feed(Result(tool=tool, result=result, is_error=bool(is_error), call_id=call_id))
        except (TypeError, ValueError) as e:
            return self.feed_malformed(_unencodable("result", tool, e))

    def feed_malformed(self, text: str) -> Answer:
        """Records an event of the framework that is not of the shape it promised (a hook input without a
        tool name, arguments that are not an object, ...): ``text`` is fed to the module as an event line
        (the session's ``feed_line``), which the module decides ``halt`` with reason ``malformed-event``
        (``halted`` once the run is over), never an allow. It is recorded in events.ndjson as any event is
        (a line that is not a JSON object is stored as a JSON string holding it), so ``runbook-host verify``
        replays it to the same decision.

        ``text`` is the framework's input as it came (JSON-encoded, or ``repr``'d, when it is not text;
        anything else given is ``repr``'d here), best preceded by why it is malformed. It is made one line
        of UTF-8 (line breaks become spaces, a lone surrogate its ``\\u`` escape) of at most
        :data:`MALFORMED_MAX_CHARS` characters (longer text is cut, and says so); an empty text, or one that
        begins with ``{``, is prefixed with ``malformed event:``, so that no payload can be read as an event
        object and decided as one. Raises :class:`RunBroken` as every event does when the run cannot record."""
        return self.feed_line(malformed_line(text))

    def feed_line(self, line: str) -> Answer:
        """Feeds one raw event line exactly as given (the wire path: a recorded or scripted line, which may
        be malformed; the module then halts, ``malformed-event``), recorded as any event is. The line
        carries its own ``at``. Unlike :meth:`feed_malformed`, nothing is changed: a line that is an event
        object is decided as that event (and no guard applies to it, as to the Rust host's ``feed_line``)."""
        if not isinstance(line, str):
            raise TypeError(f"an event line is text, not {type(line).__name__}")
        self._check_open()
        prev = self._bundle.head
        rec = self._session_call(lambda s: s.feed_line(line, prev))
        return self._record(rec)

    def approval(
        self, approver: str, granted: bool, step: Optional[str] = None, call_sha256: Optional[str] = None, request: Optional[int] = None
    ) -> Answer:
        """A human's answer, obtained by the embedding program itself (never by the agent). With
        ``call_sha256`` (from :meth:`call_sha256` or ``answer.call_sha256``) it admits that one call once.
        The module accepts it only for a request it asked (its approval ledger, docs/spec/run.md#approvals-bound-to-a-call): ``request`` is
        the ``seq`` of that ``needs-approval`` decision; without it, the module names the oldest pending request
        for the call in the current step (and records it), as for every host."""
        return self._feed(Approval(approver=approver, granted=granted, step=step, call_sha256=call_sha256, request=request))

    def advance(self, step: str) -> Answer:
        """R1: the client routes the run to ``step``."""
        return self._feed(Advance(step))

    def verdict(self, step: str, passed: bool, by: str) -> Answer:
        """A human's ruling on an unevaluable step."""
        return self._feed(Verdict(step=step, passed=passed, by=by))

    def final_output(self) -> Answer:
        """The model gave its final answer."""
        return self._feed(FinalOutput())

    def tick(self) -> Answer:
        return self._feed(Tick())

    def tick_if_due(self) -> Optional[Answer]:
        """A ``tick`` when a checkpoint deadline has passed (for loops without a timer)."""
        if self.over:
            return None
        deadline = self.state().next_deadline
        if deadline is not None and self._now_at(peek=True) >= deadline:
            return self.tick()
        return None

    def end(self, reason: Union[EndReason, str] = EndReason.NORMAL) -> Outcome:
        """Ends the run: ``end {reason}`` unless the module already ended it, then the bundle is finished
        with the report and receipt. Returns the outcome; calling it again returns it again."""
        if not self._bundle.finished:
            if self.state().phase is not Phase.OVER:
                self._feed(End(reason))
            self._finish()
        outcome = self.state().outcome
        if outcome is None:
            raise PolicyError("the ended run has no outcome")
        return outcome

    # ---- reading ----

    def state(self) -> RunState:
        """The typed state after the last event (current step, scope and its tools, outcome, ...)."""
        if self._broken is not None:
            raise self._broken
        if self._state is None:
            self._state = self._session_call(lambda s: s.state())
        return self._state

    def report(self) -> str:
        """The run report (canonical JSON); final once the run has ended."""
        if self._broken is not None:
            raise self._broken
        return self._session_call(lambda s: s.report())

    def visible_tools(self, offered: Sequence[str], whole_allowlist: bool = False) -> List[str]:
        """Which of ``offered`` a client may see now (the module's rule; see :meth:`Session.visible_tools`)."""
        if self._broken is not None:
            raise self._broken
        return self._session_call(lambda s: s.visible_tools(offered, whole_allowlist))

    def leaving(self, calls_in_flight: int, last_call_timed_out: bool) -> Tuple[EndReason, bool]:
        """How the run ends when its client leaves (the module's rule, docs/spec/adapters.md#adapter-duties)."""
        return self._session_call(lambda s: s.leaving(calls_in_flight, last_call_timed_out))

    def exit_code(self) -> int:
        """The exit code of a process that ran this run (the module's rule: 0 only when it completed)."""
        return self._session_call(lambda s: s.exit_code(False))

    def call_sha256(self, tool: str, arguments: Any) -> str:
        """The hash an approval bound to this call names (docs/spec/run.md#approvals-bound-to-a-call), from the module."""
        return self._policy.call_sha256(tool, arguments)

    # ---- approvals, for adapters ----

    async def invoke_with_approval(
        self,
        tool: str,
        arguments: Any,
        *,
        call_id: Optional[str] = None,
        step: Optional[str] = None,
        approve: Optional[Approver] = None,
        timeout: Optional[float] = None,
    ) -> Gated:
        """A tool call that may be held for a human: :meth:`invoke`; on ``needs-approval`` the embedding
        program's ``approve`` callback is asked (sync callbacks run in a worker thread, so the loop goes
        on), its answer is fed as an approval bound to this call's hash, and the call is decided again.

        Fail closed: no callback, a callback that raises, times out (``timeout`` seconds) or answers
        anything but an :class:`ApprovalAnswer` leaves the call blocked (the reason is in
        :attr:`Gated.problem`). A refused or not-accepted approval blocks it too."""
        first = self.invoke(tool, arguments, call_id=call_id, step=step)
        if first.kind is not DecisionKind.NEEDS_APPROVAL:
            return Gated(first)
        if approve is None:
            return Gated(first, problem="no approval callback was given, so the call stays blocked")
        assert first.call_sha256 is not None
        request = ApprovalRequest(self.run_id, first.decision.step, tool, arguments, first.call_sha256, first.explanation)
        try:
            if inspect.iscoroutinefunction(approve) or inspect.iscoroutinefunction(getattr(approve, "__call__", None)):
                pending: Any = approve(request)
            else:
                pending = asyncio.to_thread(approve, request)
            got = await (asyncio.wait_for(pending, timeout) if timeout is not None else pending)
            if inspect.isawaitable(got):
                got = await (asyncio.wait_for(got, timeout) if timeout is not None else got)
        except asyncio.TimeoutError:
            return Gated(first, problem=f"no approval came within {timeout:g} s, so the call stays blocked")
        except Exception as e:  # noqa: BLE001 - a callback that raises blocks the tool
            log.warning("runbook_policy: the approval callback raised %s: %s; the call %s is blocked", type(e).__name__, e, first.call_sha256)
            return Gated(first, problem=f"the approval callback failed ({type(e).__name__}), so the call stays blocked")
        if not (isinstance(got, ApprovalAnswer) and isinstance(got.approver, str) and got.approver and isinstance(got.granted, bool)):
            return Gated(first, problem="the approval callback answered no ApprovalAnswer(approver, granted), so the call stays blocked")
        approval = self.approval(got.approver, got.granted, step=first.decision.step, call_sha256=first.call_sha256, request=first.decision.seq)
        if not (approval.allowed and got.granted):
            return Gated(first, approval=approval)
        return Gated(self.invoke(tool, arguments, call_id=call_id, step=step), approval=approval)

    # ---- context manager ----

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Ends the run (``interrupted`` when the block raised) unless it is finished or broken."""
        if self._broken is None and not self._bundle.finished:
            self.end(EndReason.NORMAL if exc_type is None else EndReason.INTERRUPTED)

    # ---- internals ----

    def _now(self) -> int:
        return _ms(self._clock())

    def _now_at(self, peek: bool = False) -> int:
        """Milliseconds since the run began, on the run's clock, never lower than the last one."""
        at = max(self._last_at, self._now() - self._t0)
        if not peek:
            self._last_at = at
        return at

    def _set_guard(self) -> None:
        needles = list(self._guard.needles)
        self._session_call(lambda s: s.set_guard(needles))
        self._needles = needles

    def _break(self, message: str) -> RunBroken:
        if self._broken is None:
            self._broken = RunBroken(f"run {self.run_id}: {message}")
        return self._broken

    def _break_trapped(self, message: str) -> RunBroken:
        # No module to vouch for a report or a link: the bundle ends without one (verify refuses it).
        if not self._bundle.finished:
            try:
                self._bundle.end_without_report("host-trap")
            except (OSError, PolicyError, ValueError):
                pass
        return self._break(message)

    def _end_unwritable(self) -> None:
        """After a write of the evidence failed: the bundle is ended without a report where the disk still
        takes it (run.json says ``ended_without_report: bundle-unwritable``), unless its receipt was written
        already (the receipt pins run.json: rewriting it would turn a finished bundle into an altered one)."""
        if not self._bundle.finished and not self._bundle.has_receipt():
            try:
                self._bundle.end_without_report("bundle-unwritable")
            except (OSError, PolicyError, ValueError):
                pass

    def _session_call(self, f: Callable[[Session], Any]) -> Any:
        try:
            return f(self._session)
        except ModuleTrap as e:
            raise self._break_trapped(str(e)) from None

    def _check_open(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self._bundle.finished:
            raise PolicyError(f"run {self.run_id} is over and its evidence is sealed; start a new run")

    def _feed(self, event: Event) -> Answer:
        self._check_open()
        at = self._now_at()
        prev = self._bundle.head
        rec: Recorded = self._session_call(lambda s: s.feed(event, at, prev))
        return self._record(rec)

    def _record(self, rec: Recorded) -> Answer:
        try:
            self._bundle.append_record(rec.event_line, rec.record_line, rec.link)
        except OSError as e:
            # Decided but not recorded: nothing more is decided, and the bundle says why where it can.
            self._end_unwritable()
            raise self._break(f"cannot record the event: {e}") from None
        self._state = rec.state
        return Answer(rec.decision, rec.explanation, rec.state, rec.event_line, rec.decision_line, rec.link)

    def _finish(self) -> None:
        report = self._session_call(lambda s: s.report())
        try:
            self._bundle.finish(report)
        except (OSError, PolicyError, ValueError) as e:
            self._end_unwritable()
            raise self._break(f"cannot finish the bundle: {e}") from None

