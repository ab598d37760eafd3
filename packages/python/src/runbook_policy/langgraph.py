"""LangGraph: a ``ToolNode`` whose every tool call is decided by the policy module first.

::

    import runbook_policy as rp
    from runbook_policy.langgraph import RunbookToolNode, coverage, finish

    run = rp.Run.create(rp.load(), "runbook.yaml", adapter="langgraph", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage(every_tool_in_the_node=True))
    graph.add_node("tools", RunbookToolNode([read_file, deploy], run=run, approve=ask_a_human))
    ...                                   # the model node, tools_condition, as in any LangGraph agent
    state = graph.compile().invoke({"messages": [("user", "ship the hotfix")]})
    finish(run)                           # the agent answered: final_output, then end (report, receipt)

The interception point is LangGraph's own tool-call interceptor of ``langgraph.prebuilt.ToolNode``
(``wrap_tool_call`` / ``awrap_tool_call``, langgraph 1.2): :class:`RunbookToolNode` is a ``ToolNode``
with :class:`RunbookToolCalls` installed, and :class:`RunbookToolCalls` can be given to a ``ToolNode``
of your own. For each tool call of the model's ``AIMessage`` that reaches the node:

- the call (``tool_call["name"]``, its ``args``) is fed to the run as an ``invoke`` with the model's
  tool-call id (``tool_call["id"]``), before anything runs;
- **allowed**: the node runs the tool (``execute``); what the model is then shown is fed as a ``result``:
  the ``ToolMessage``'s content, ``is_error`` when its ``status`` is ``"error"`` (a tool error the node
  handled, ``handle_tool_errors``). LangChain turns a tool's return value that is not text into JSON text
  for the model; content that is the JSON text of an object or an array is recorded decoded, so that a
  runbook's ``assert`` reaches its fields (``/result/status``); other text is recorded as it is. An
  exception the node lets through is recorded as an error result (``Type: message``) and raised on;
- **blocked** (``deny`` with a deviation, ``halt``): the tool never runs; the model gets LangChain's own
  tool error, a ``ToolMessage`` with ``status="error"`` that names the deviation and carries the module's
  sentence, and can go on (take the step the runbook allows, or stop);
- **needs-approval**: the call is held until ``approve`` (a callback of the embedding program, never the
  agent's; sync or async) answers; its answer is fed as an approval bound to this call's hash (DESIGN
  9.19) and the call is decided again. A callback that raises, answers anything but an
  :class:`~runbook_policy.ApprovalAnswer`, or does not answer within ``approval_timeout`` seconds, and a
  missing callback, block the call. LangGraph's own human-in-the-loop, ``interrupt()``, is not used: it
  pauses the whole graph (and needs a checkpointer) and re-runs the node on resume, while the run must
  decide each call once; the program's ``approve`` may of course page a person however it likes;
- arguments that are not JSON (a program-built ``AIMessage`` may carry any Python value) are fed as a
  malformed event: recorded, and the run halts (``malformed-event``), never an allow. A run that cannot
  decide or record (``PolicyError``, ``RunBroken``) blocks every call.

A graph run with ``invoke`` (sync) runs a node's tool calls in worker threads: the decisions and results
of one run are then fed one at a time (a lock per run), and a gated call holds the others' decisions
while it waits for its approval; the tools themselves still run in parallel. With ``ainvoke`` they are
fed from the event loop, as they come.

**What this adapter cannot see** (seed 000: coverage is complete only if the client routes every tool
through it): tool calls that do not go through a :class:`RunbookToolNode` (or a ``ToolNode`` with
:class:`RunbookToolCalls`): a node that calls a tool (or any function, or an API) directly, another
``ToolNode``, the tools of a sub-graph or sub-agent built with its own node, and tools that run inside a
tool; provider-hosted (native) tools given to ``bind_tools`` as dicts (web search, code execution),
which the model provider runs itself and which never reach a node; and tool calls the model wrote with
arguments LangChain could not parse (``AIMessage.invalid_tool_calls``), which no ``ToolNode`` runs.
Claim :data:`runbook_policy.COMPLETE` only when every tool the graph can run is in the wrapped node and
the model has no native tools; :func:`coverage` says which. Anything else is ``Blind([...])``, and the
module then refuses destructive or irreversible work (``coverage-incomplete``). The model's final answer
is not a tool call either, and a LangGraph graph has no hook that runs only when the agent has answered:
the embedding program calls :func:`finish` when ``invoke`` returns.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from typing import Any, Awaitable, Callable, Coroutine, Optional, Sequence, Tuple, TypeVar, Union

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ._run import Approver, Gated, Run
from ._types import COMPLETE, Blind, Coverage, EndReason, Outcome, PolicyError

__all__ = ["ADAPTER", "NATIVE_TOOLS", "TOOLS_OUTSIDE_THE_NODE", "RunbookToolCalls", "RunbookToolNode", "coverage", "finish"]

ADAPTER = "langgraph"

#: What the adapter cannot see when some tool the graph can run is not in a wrapped node.
TOOLS_OUTSIDE_THE_NODE = "tools-outside-the-runbook-tool-node"
#: What it cannot see when the model has native tools (run by the model provider).
NATIVE_TOOLS = "native-tools"

_Output = Union[ToolMessage, Command, list]
_T = TypeVar("_T")


def coverage(*, every_tool_in_the_node: bool, native_tools: bool = False) -> Coverage:
    """The coverage to claim for a run supervised through :class:`RunbookToolNode`: complete only when every
    tool the graph can run goes through a wrapped node and the model has no native tools; else what is out
    of sight."""
    blind = ([] if every_tool_in_the_node else [TOOLS_OUTSIDE_THE_NODE]) + ([NATIVE_TOOLS] if native_tools else [])
    return Blind(blind) if blind else COMPLETE


def finish(run: Run, reason: Union[EndReason, str] = EndReason.NORMAL) -> Outcome:
    """Ends ``run`` once the graph has returned: with the normal reason, the agent's answer is fed as the
    final output first (unless the run is already over); then the run is ended (report and receipt
    written). Pass ``EndReason.INTERRUPTED`` when the graph raised. Returns the outcome; a broken run raises
    :class:`~runbook_policy.RunBroken`."""
    if EndReason(reason) is EndReason.NORMAL and not run.over:
        run.final_output()
    return run.end(reason)


# One lock per run: a sync graph feeds a run from several worker threads, and a Run is not thread-safe.
_locks: "weakref.WeakKeyDictionary[Run, threading.Lock]" = weakref.WeakKeyDictionary()
_locks_lock = threading.Lock()


def _lock_of(run: Run) -> threading.Lock:
    with _locks_lock:
        lock = _locks.get(run)
        if lock is None:
            lock = _locks[run] = threading.Lock()
        return lock


def _run_coroutine(coro: Coroutine[Any, Any, _T]) -> _T:
    """Runs ``coro`` to its end from sync code, on a loop of its own (in a fresh thread when this thread
    already runs a loop, e.g. a sync interceptor that an async graph calls)."""

    def on_own_loop() -> _T:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            # close(), not asyncio.run(): it does not wait for a sync approval callback that outlived its
            # timeout (its worker thread is left to end on its own), so the call is blocked on time.
            loop.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return on_own_loop()
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = on_own_loop()
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="runbook-policy-langgraph")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _error(request: ToolCallRequest, content: str) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(content=content, name=call["name"], tool_call_id=call["id"], status="error")


def _tool_message(output: Any, call_id: Optional[str]) -> Optional[ToolMessage]:
    """The ToolMessage the node answers this call with: the output itself, or the one for this call in a
    ``Command``'s update (a tool may answer with a Command) or in a list of them."""
    found: list = []

    def collect(item: Any) -> None:
        if isinstance(item, ToolMessage):
            found.append(item)
        elif isinstance(item, Command) and isinstance(item.update, dict):
            for value in item.update.values():
                if isinstance(value, (list, tuple)):
                    found.extend(m for m in value if isinstance(m, ToolMessage))
                elif isinstance(value, ToolMessage):
                    found.append(value)
        elif isinstance(item, (list, tuple)):
            for x in item:
                collect(x)

    collect(output)
    mine = [m for m in found if m.tool_call_id == call_id]
    return (mine or found or [None])[0]


def _observed(output: Any, call_id: Optional[str]) -> Tuple[Any, bool]:
    """``(result, is_error)`` of what the node answered: the content the model is shown (see the module)."""
    message = _tool_message(output, call_id)
    if message is None:
        return None, False  # a Command that updates the state without a message for the model
    content: Any = message.content
    if isinstance(content, str) and content[:1] in ("{", "["):
        # LangChain's JSON text of a return value that was not text: the value itself is what a runbook asserts on.
        try:
            content = json.loads(content)
        except ValueError:
            pass
    return content, message.status == "error"


class RunbookToolCalls:
    """The tool-call interceptor that asks ``run`` about every call first (see the module).

    Give :meth:`wrap_tool_call` and :meth:`awrap_tool_call` to a ``ToolNode`` (``wrap_tool_call=``,
    ``awrap_tool_call=``), or use :class:`RunbookToolNode`. Composed with interceptors of your own, this one
    must be the innermost (the one that calls the node's ``execute``): an interceptor inside it could
    change the call after it was decided, and one outside it that retries has each attempt decided. Give
    both: a ``ToolNode`` with only the sync one calls it on the event loop under ``ainvoke``, which then
    stands still while a gated call waits for its approval.
    """

    def __init__(self, run: Run, *, approve: Optional[Approver] = None, approval_timeout: Optional[float] = None) -> None:
        if approval_timeout is not None and not approval_timeout > 0:
            raise ValueError("approval_timeout must be positive (or None: as long as it takes)")
        self.run = run
        """The supervised run (``Run.create(..., adapter="langgraph")``)."""
        self.approve = approve
        """The embedding program's approval callback for gated calls; without one they stay blocked."""
        self.approval_timeout = approval_timeout
        """Seconds to wait for ``approve`` before the call is blocked (None: as long as it takes)."""

    def _decide(self, request: ToolCallRequest) -> Coroutine[Any, Any, Gated]:
        call = request.tool_call
        return self.run.invoke_with_approval(call["name"], call["args"], call_id=call.get("id"), approve=self.approve, timeout=self.approval_timeout)

    @staticmethod
    def _blocked(request: ToolCallRequest, gated: Gated) -> ToolMessage:
        return _error(request, f"blocked by the runbook: {gated.message}")

    def _record(self, request: ToolCallRequest, output: Any) -> _Output:
        call_id = request.tool_call.get("id")
        result, is_error = _observed(output, call_id)
        try:
            self.run.result(request.tool_call["name"], result, is_error=is_error, call_id=call_id)
        except PolicyError as e:
            # A result that cannot be recorded is not handed to the model: every event is on the record first.
            return _error(request, f"blocked: the runbook supervisor cannot record this call's result ({e})")
        return output

    def _record_raised(self, request: ToolCallRequest, e: Exception) -> None:
        try:
            self.run.result(request.tool_call["name"], f"{type(e).__name__}: {e}", is_error=True, call_id=request.tool_call.get("id"))
        except PolicyError:
            pass  # the tool's own exception is what the node handles or raises; the run says it is broken

    def wrap_tool_call(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], _Output]) -> _Output:
        """``ToolNode(wrap_tool_call=...)``: the interceptor of a graph run with ``invoke``."""
        lock = _lock_of(self.run)
        try:
            with lock:
                gated = _run_coroutine(self._decide(request))
        except PolicyError as e:
            # The run cannot decide or record (broken, trapped, sealed): nothing runs unrecorded.
            return _error(request, f"blocked: the runbook supervisor cannot decide this call ({e})")
        if not gated.allowed:
            return self._blocked(request, gated)
        try:
            output = execute(request)
        except GraphBubbleUp:
            raise  # LangGraph's own control flow (an interrupt() inside the tool): the tool has not finished
        except Exception as e:
            with lock:
                self._record_raised(request, e)
            raise
        with lock:
            return self._record(request, output)

    async def awrap_tool_call(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[_Output]]) -> _Output:
        """``ToolNode(awrap_tool_call=...)``: the interceptor of a graph run with ``ainvoke``."""
        try:
            gated = await self._decide(request)
        except PolicyError as e:
            return _error(request, f"blocked: the runbook supervisor cannot decide this call ({e})")
        if not gated.allowed:
            return self._blocked(request, gated)
        try:
            output = await execute(request)
        except GraphBubbleUp:
            raise
        except Exception as e:
            self._record_raised(request, e)
            raise
        return self._record(request, output)


class RunbookToolNode(ToolNode):
    """A ``langgraph.prebuilt.ToolNode`` whose tool calls are decided by ``run`` first (:class:`RunbookToolCalls`).

    ``tools`` and the other keyword arguments (``name``, ``handle_tool_errors``, ``messages_key``, ...) are
    ``ToolNode``'s. Its ``wrap_tool_call``/``awrap_tool_call`` are taken by the runbook: to add interceptors
    of your own, build a ``ToolNode`` that calls :class:`RunbookToolCalls` innermost.
    """

    def __init__(
        self,
        tools: Sequence[Union[BaseTool, Callable]],
        *,
        run: Run,
        approve: Optional[Approver] = None,
        approval_timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        taken = sorted({"wrap_tool_call", "awrap_tool_call"} & kwargs.keys())
        if taken:
            raise TypeError(f"RunbookToolNode sets {', '.join(taken)} itself; compose your interceptor with RunbookToolCalls in a ToolNode instead")
        self.runbook = RunbookToolCalls(run, approve=approve, approval_timeout=approval_timeout)
        super().__init__(tools, wrap_tool_call=self.runbook.wrap_tool_call, awrap_tool_call=self.runbook.awrap_tool_call, **kwargs)
