"""Google ADK: a Runner plugin so that every tool call of every agent is decided by the policy module first.

::

    import runbook_policy as rp
    from runbook_policy.google_adk import RunbookPlugin, coverage
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner

    run = rp.Run.create(rp.load(), "runbook.yaml", adapter="google-adk", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage())
    app = App(name="release", root_agent=agent, plugins=[RunbookPlugin(run, approve=ask_a_human)])
    async with InMemoryRunner(app=app) as runner:    # closing the runner ends the run
        ...  # runner.run_async(...)

The interception point is an ADK plugin (:class:`google.adk.plugins.BasePlugin`) of the Runner, not an
agent's ``before_tool_callback``: a plugin's tool callbacks run for every agent the Runner runs (sub-agents,
workflow nodes, and agents wrapped in an ``AgentTool``, which inherit the Runner's plugins), before the
agent's own callbacks. ADK's agent transfers (``transfer_to_agent``) and ``AgentTool`` calls are tool calls
too, decided like any other: a runbook that delegates declares them. For each call
(:meth:`RunbookPlugin.before_tool_callback`):

- the call (its arguments as JSON, through ``pydantic_core.to_jsonable_python``) is fed to the run as an
  ``invoke`` with ADK's function-call id (``ToolContext.function_call_id``: the model's id, or the
  ``adk-...`` id ADK gives a call without one), before anything runs;
- **allowed**: the callback answers ``None`` and the tool runs; what it returns is fed as a ``result``
  (:meth:`~RunbookPlugin.after_tool_callback`; a dict with an ``error`` entry, ADK's own shape of a failed
  call, as an error result), and an exception it raises as an error result
  (:meth:`~RunbookPlugin.on_tool_error_callback`), which ADK then raises as it would without the plugin;
- **blocked** (``deny`` with a deviation, ``halt``): the callback answers ``{"error": "blocked by the runbook:
  ..."}``, so ADK skips the tool and the model gets that as the function response (ADK's own error shape,
  as for a tool it cannot find), naming the deviation and the module's sentence;
- **needs-approval**: the call is held until ``approve`` (a callback of the embedding program, never the
  agent's) answers; its answer is fed as an approval bound to this call's hash (docs/spec/run.md#approvals-bound-to-a-call) and the call is
  decided again. A callback that raises, times out or is missing blocks the call;
- a call whose arguments are not JSON is fed as a malformed event: recorded, and the run halts
  (``malformed-event``), never an allow. A run that cannot decide or record (``PolicyError``, ``RunBroken``)
  blocks every call.

The end of the agent: when an invocation of the Runner ends with the agent's answer
(:meth:`~RunbookPlugin.after_run_callback`), ``final_output`` is fed, and the run is ended if it stands at a
terminal of the runbook or the module ended it. Otherwise it stays open for the session's next message, and
is ended (report and receipt written) when the Runner closes (``async with`` or ``await runner.close()``,
which calls :meth:`~RunbookPlugin.close`), or by ``run.end()``.

**What this adapter cannot see** (coverage is complete only if every tool call reaches the plugin):

- built-in tools that the model runs itself (``google_search``, ``url_context``, Vertex AI / enterprise
  search, Maps grounding, ``BuiltInCodeExecutor``): they are configuration of the model request, never a
  function call ADK executes, so no callback sees them (``native_tools=True``);
- an agent's ``code_executor`` (``UnsafeLocalCodeExecutor``, container, Vertex AI, ...): ADK runs the
  code the model writes without a tool call (``code_executor=True``);
- the tools of an agent wrapped in ``AgentTool(..., include_plugins=False)``: its own Runner has no plugin
  (``isolated_agent_tools=True``);
- a runner built without this plugin, and a call answered by a plugin registered before it (put it first);
- arguments changed after the decision: an agent's own ``before_tool_callback`` (it runs after the
  plugins) that edits ``args`` in place makes the tool run with arguments the module did not judge. Install
  no such rewriter beside this plugin, or the coverage claim is not true.

:func:`coverage` says what to claim: :data:`runbook_policy.COMPLETE` only without any of the first three;
anything else is ``Blind([...])``, and the module then refuses destructive or irreversible work
(``coverage-incomplete``). ADK's own confirmation (``require_confirmation``) applies after the runbook's
decision; a call it holds is recorded with the confirmation request as its (error) result.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from google.adk.plugins import BasePlugin

from ._jsonable import jsonable as _jsonable
from ._run import Approver, Run
from ._types import COMPLETE, Blind, Coverage, PolicyError

if TYPE_CHECKING:  # pragma: no cover
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext

__all__ = ["ADAPTER", "CODE_EXECUTOR", "ISOLATED_AGENT_TOOLS", "NATIVE_TOOLS", "RunbookPlugin", "coverage"]

ADAPTER = "google-adk"

#: What the plugin cannot see when an agent has built-in tools that the model runs itself.
NATIVE_TOOLS = "native-tools"
#: What it cannot see when an agent has a ``code_executor``.
CODE_EXECUTOR = "code-executor"
#: What it cannot see when an ``AgentTool`` runs its agent without the Runner's plugins.
ISOLATED_AGENT_TOOLS = "agent-tools-without-plugins"


def coverage(*, native_tools: bool = False, code_executor: bool = False, isolated_agent_tools: bool = False) -> Coverage:
    """The coverage to claim for a Runner with a :class:`RunbookPlugin`: complete only when no agent it runs
    has built-in (model-run) tools or a code executor, and no ``AgentTool`` drops the plugins; else what is
    out of sight."""
    blind = [w for w, on in ((NATIVE_TOOLS, native_tools), (CODE_EXECUTOR, code_executor), (ISOLATED_AGENT_TOOLS, isolated_agent_tools)) if on]
    return Blind(blind) if blind else COMPLETE


def _is_error(result: Any) -> bool:
    """ADK's own shape of a failed call (a missing argument, a tool not found, a rejected confirmation)."""
    return isinstance(result, dict) and bool(result.get("error"))


class RunbookPlugin(BasePlugin):
    """A Runner plugin that has the runbook's policy module decide every tool call first (see the module).

    ``run``: the supervised run (``Run.create(..., adapter="google-adk")``). ``approve``: the embedding
    program's approval callback for gated calls (without one they stay blocked); ``approval_timeout``: seconds
    to wait for it before the call is blocked (None: as long as it takes). ``end_on_close``: end the run
    when the Runner closes.
    """

    def __init__(
        self,
        run: Run,
        *,
        approve: Optional[Approver] = None,
        approval_timeout: Optional[float] = None,
        end_on_close: bool = True,
        name: str = "runbook",
    ) -> None:
        super().__init__(name=name)
        self.run = run
        self.approve = approve
        self.approval_timeout = approval_timeout
        self.end_on_close = end_on_close
        # Calls the run allowed whose result is not recorded yet, by their ToolContext (the one object ADK
        # hands to all callbacks of a call); the context is kept so its id is not reused meanwhile.
        self._running: Dict[int, Tuple["ToolContext", str, Optional[str]]] = {}

    async def before_tool_callback(self, *, tool: "BaseTool", tool_args: Dict[str, Any], tool_context: "ToolContext") -> Optional[Dict[str, Any]]:
        """Decides the call: ``None`` lets ADK run the tool, a dict answers the call instead of it."""
        call_id = tool_context.function_call_id
        try:
            gated = await self.run.invoke_with_approval(
                tool.name, _jsonable(tool_args), call_id=call_id, approve=self.approve, timeout=self.approval_timeout
            )
        except PolicyError as e:
            # The run cannot decide or record (broken, trapped, sealed): nothing runs unrecorded.
            return {"error": f"blocked: the runbook supervisor cannot decide this call ({e})"}
        if not gated.allowed:
            return {"error": f"blocked by the runbook: {gated.message}"}
        self._running[id(tool_context)] = (tool_context, tool.name, call_id)
        return None

    async def after_tool_callback(
        self, *, tool: "BaseTool", tool_args: Dict[str, Any], tool_context: "ToolContext", result: Any
    ) -> Optional[Dict[str, Any]]:
        """Records what the tool returned; ``None`` leaves the result as it is."""
        call = self._running.pop(id(tool_context), None)
        if call is None:
            return None  # a call this plugin blocked (ADK shows after-tool callbacks its answer too)
        return self._record(call, _jsonable(result), _is_error(result))

    async def on_tool_error_callback(
        self, *, tool: "BaseTool", tool_args: Dict[str, Any], tool_context: "ToolContext", error: BaseException
    ) -> Optional[Dict[str, Any]]:
        """Records the exception of an allowed call as an error result; ADK then raises it as it would
        without the plugin (or, for a tool name it does not know, answers the model with its own error)."""
        call = self._running.pop(id(tool_context), None)
        if call is None:
            return None
        text = "cancelled before it finished" if isinstance(error, asyncio.CancelledError) else f"{type(error).__name__}: {error}"
        return self._record(call, text, True)

    def _record(self, call: Tuple[Any, str, Optional[str]], result: Any, is_error: bool) -> Optional[Dict[str, Any]]:
        _, name, call_id = call
        try:
            self.run.result(name, result, is_error=is_error, call_id=call_id)
        except PolicyError as e:
            # A result that cannot be recorded is not handed to the model: every event is on the record first.
            return {"error": f"blocked: the runbook supervisor cannot record this call's result ({e})"}
        return None

    async def after_run_callback(self, *, invocation_context: "InvocationContext") -> None:
        """An invocation of the Runner ended: its answer is the final output; at a terminal the run ends."""
        run = self.run
        if self._running or run.broken is not None or run.finished:
            # Calls still running: this is the nested run of an AgentTool, whose answer goes to its caller.
            return
        if not run.over and _answered(invocation_context):
            run.final_output()
        if run.over or run.state().at_terminal:
            run.end()

    async def close(self) -> None:
        """The Runner closes: the run ends (``incomplete`` away from a terminal) unless it has already."""
        if self.end_on_close and self.run.broken is None and not self.run.finished:
            self.run.end()


def _answered(invocation_context: "InvocationContext") -> bool:
    """Whether the invocation ended with an agent's answer, not paused on a long-running tool, a confirmation
    or a credential it asked the user for."""
    invocation_id = invocation_context.invocation_id
    last = next((e for e in reversed(invocation_context.session.events) if e.invocation_id == invocation_id), None)
    if last is None or last.author == "user" or not last.is_final_response():
        return False
    actions = last.actions
    return not (last.long_running_tool_ids or actions.requested_tool_confirmations or actions.requested_auth_configs)
