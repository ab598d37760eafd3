"""OpenAI Agents SDK: every function tool of an agent decided by the policy module first.

::

    import runbook_policy as rp
    from agents import Agent, Runner
    from runbook_policy.openai_agents import coverage, supervise

    agent = Agent(name="release-bot", model=model, tools=[read_file, deploy])
    run = rp.Run.create(rp.load(), "runbook.yaml", adapter="openai-agents", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage(agent))
    result = await Runner.run(supervise(agent, run, approve=ask_a_human), "ship the hotfix")
    run.end()  # already ended when the agent answered: this returns the outcome

:func:`supervise` returns a copy of the agent (``agent.clone``; the agent given is not changed) in which
each :class:`agents.FunctionTool` is a copy carrying two things of the SDK's own:

- a **tool input guardrail**, appended after the tool's own guardrails. The SDK runs it before the
  ``on_tool_start`` hooks and before the tool. It feeds the call to the run as an ``invoke`` (the arguments
  the model sent, decoded from JSON; the model's ``call_id``). **Allowed**: it answers ``allow`` and the
  tool runs. **Blocked** (``deny`` with a deviation, ``halt``): it answers ``reject_content`` with
  ``"blocked by the runbook: "`` and the module's sentence. This is the SDK's own refusal of a tool call:
  the tool never runs, no tool hooks fire, the model gets that text as the call's output (an error output
  for a programmatic caller), and the refusal is listed in ``result.tool_input_guardrail_results``.
  **needs-approval**: the guardrail waits for ``approve``, a callback of the embedding program, never the
  agent's (:meth:`runbook_policy.Run.invoke_with_approval`). Its answer is fed as an approval bound to the
  call's hash and the call is decided again. No callback, a refusal, an error or no answer within
  ``approval_timeout`` blocks the call. Arguments that are not a JSON object are fed as a malformed event:
  the run halts (``malformed-event``) and the tool never runs. A run that cannot decide or record
  (``PolicyError``: broken, sealed) blocks the call too.
- a **wrapped** ``on_invoke_tool`` that feeds the tool's return value as a ``result``. An exception it
  raises is fed as an error result, then handled by the tool's own failure policy (its
  ``failure_error_function``: by default the SDK's generic error message goes to the model; with ``None``
  the run raises). A result that cannot be recorded is not handed to the model: it gets a blocked message
  instead. A call that reaches the tool without passing the guardrail is decided here first, and a blocked
  one returns the module's sentence as its output.

Agents this one hands off to (``Agent`` objects in ``handoffs``) are supervised the same way, in the same
run. When a supervised agent gives the final answer (its ``on_end`` hook; the agent's own hooks still run),
the adapter feeds ``final_output`` and ends the run: the report and receipt are written. Pass
``end_run=False`` to feed them yourself, for example to keep one run across several ``Runner.run`` turns.
A ``Runner.run`` that raises (max turns, a guardrail tripwire) never reaches ``on_end``: end the run
yourself (``with run:`` ends it ``interrupted``). A run the SDK interrupted for its own ``needs_approval``
is still open and goes on when resumed.

**What this adapter cannot see** (seed 000: coverage is complete only if every tool goes through it):
tools the OpenAI platform runs itself (``WebSearchTool``, ``FileSearchTool``, ``CodeInterpreterTool``,
``ImageGenerationTool``, ``HostedMCPTool``, ``ToolSearchTool``, ``ProgrammaticToolCallingTool``: they never
reach the process); tools the SDK runs here but not as a ``FunctionTool`` (computer use, ``ShellTool``,
``LocalShellTool``, ``ApplyPatchTool``, ``CustomTool``); tools of ``mcp_servers``, listed at run time;
what an agent used as a tool (``agent.as_tool()``) does inside (its call is decided, its own tools are
not); agents behind ``Handoff`` objects (``handoff(...)``); and tools added to the agent after
:func:`supervise`, for instance by a hook. :func:`coverage` names what of these an agent has.
Claim :data:`runbook_policy.COMPLETE` only when it says so. Anything else is ``Blind([...])``, and the module
then refuses destructive or irreversible work (``coverage-incomplete``). The module judges the call it
is shown, not what an allowed tool does beyond it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from typing import Any, Dict, List, Optional, Tuple, TypeVar

from agents import (
    Agent,
    AgentHookContext,
    AgentHooks,
    CodeInterpreterTool,
    FileSearchTool,
    FunctionTool,
    Handoff,
    HostedMCPTool,
    ImageGenerationTool,
    ProgrammaticToolCallingTool,
    RunContextWrapper,
    Tool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolSearchTool,
    WebSearchTool,
)
from agents.tool_context import ToolContext
from agents.tool import maybe_invoke_function_tool_failure_error_function, set_function_tool_failure_error_function

from ._jsonable import jsonable as _jsonable
from ._run import Approver, Run
from ._types import COMPLETE, Blind, Coverage, PolicyError

__all__ = [
    "ADAPTER",
    "AGENTS_AS_TOOLS",
    "HANDOFF_OBJECTS",
    "HOSTED_TOOLS",
    "MCP_SERVERS",
    "NON_FUNCTION_TOOLS",
    "coverage",
    "supervise",
]

log = logging.getLogger(__name__)

ADAPTER = "openai-agents"

#: What the adapter cannot see when an agent has tools the OpenAI platform runs.
HOSTED_TOOLS = "hosted-tools"
#: ... tools the SDK runs in the process but not as a FunctionTool (computer use, shell, apply_patch, custom).
NON_FUNCTION_TOOLS = "non-function-tools"
#: ... tools of the agent's MCP servers (listed at run time).
MCP_SERVERS = "mcp-servers"
#: ... the tool calls of an agent used as a tool (``agent.as_tool()``).
AGENTS_AS_TOOLS = "agents-as-tools"
#: ... agents behind ``Handoff`` objects.
HANDOFF_OBJECTS = "handoff-objects"

_HOSTED = (WebSearchTool, FileSearchTool, CodeInterpreterTool, ImageGenerationTool, HostedMCPTool, ToolSearchTool, ProgrammaticToolCallingTool)

A = TypeVar("A", bound=Agent[Any])


def _agents(agent: Agent[Any]) -> List[Agent[Any]]:
    """The agent and every agent it can hand off to by an ``Agent`` in ``handoffs``, each once."""
    seen: Dict[int, Agent[Any]] = {}
    todo = [agent]
    while todo:
        a = todo.pop()
        if id(a) not in seen:
            seen[id(a)] = a
            todo.extend(h for h in a.handoffs if isinstance(h, Agent))
    return list(seen.values())


def coverage(agent: Agent[Any]) -> Coverage:
    """The coverage to claim for a run of ``supervise(agent, run)``: complete only when every tool of the
    agent, and of the agents it hands off to, is a function tool; else ``Blind`` naming what is out of sight."""
    blind: List[str] = []
    for a in _agents(agent):
        for tool in a.tools:
            if isinstance(tool, FunctionTool):
                # The SDK marks the FunctionTool of agent.as_tool() (no public accessor).
                what = AGENTS_AS_TOOLS if getattr(tool, "_is_agent_tool", False) else None
            else:
                what = HOSTED_TOOLS if isinstance(tool, _HOSTED) else NON_FUNCTION_TOOLS
            if what and what not in blind:
                blind.append(what)
        if a.mcp_servers and MCP_SERVERS not in blind:
            blind.append(MCP_SERVERS)
        if any(isinstance(h, Handoff) for h in a.handoffs) and HANDOFF_OBJECTS not in blind:
            blind.append(HANDOFF_OBJECTS)
    return Blind(blind) if blind else COMPLETE


def supervise(agent: A, run: Run, *, approve: Optional[Approver] = None, approval_timeout: Optional[float] = None, end_run: bool = True) -> A:
    """A copy of ``agent`` whose function tools (and those of the agents it hands off to) are decided by
    ``run`` before they run, and whose final answer ends the run (see the module).

    ``approve``: the embedding program's callback for gated calls (sync or async, given an
    :class:`~runbook_policy.ApprovalRequest`, answering an :class:`~runbook_policy.ApprovalAnswer`); without
    one they stay blocked. ``approval_timeout``: seconds to wait for it (None: as long as it takes).
    ``end_run``: feed ``final_output`` and end the run when a supervised agent gives its final answer.
    """
    supervisor = _Supervisor(run, approve, approval_timeout, end_run)
    clones: Dict[int, Agent[Any]] = {}

    def clone(a: Agent[Any]) -> Agent[Any]:
        if id(a) not in clones:
            tools = [supervisor.wrap(t) if isinstance(t, FunctionTool) else t for t in a.tools]
            c = a.clone(tools=tools, hooks=_EndHooks(supervisor, a.hooks), handoffs=list(a.handoffs))
            clones[id(a)] = c  # before the handoffs: agents may hand off to each other
            c.handoffs = [clone(h) if isinstance(h, Agent) else h for h in a.handoffs]
        return clones[id(a)]

    return clone(agent)  # type: ignore[return-value]


class _Supervisor:
    """The run and the approval channel, shared by every wrapped tool of one supervised agent."""

    def __init__(self, run: Run, approve: Optional[Approver], approval_timeout: Optional[float], end_run: bool) -> None:
        self.run = run
        self.approve = approve
        self.approval_timeout = approval_timeout
        self.end_run = end_run
        # Calls the guardrail allowed whose tool has not run yet: call id -> (tool, arguments as sent).
        self.allowed: Dict[str, Tuple[str, str]] = {}

    async def decide(self, tool: str, raw_arguments: str, call_id: str) -> Optional[str]:
        """Feeds the call; None when it may run, else what the model is told instead."""
        try:
            arguments = json.loads(raw_arguments) if raw_arguments else {}  # "" is {} to the SDK too
            if not isinstance(arguments, dict):
                raise ValueError(f"the arguments are a JSON {type(arguments).__name__}, not an object")
        except ValueError as e:
            return self._malformed(tool, raw_arguments, e)
        try:
            gated = await self.run.invoke_with_approval(tool, arguments, call_id=call_id, approve=self.approve, timeout=self.approval_timeout)
        except PolicyError as e:
            # The run cannot decide or record (broken, sealed): nothing runs unrecorded.
            return f"blocked: the runbook supervisor cannot decide this call ({e})"
        return None if gated.allowed else f"blocked by the runbook: {gated.message}"

    def _malformed(self, tool: str, raw_arguments: str, error: Exception) -> str:
        try:
            a = self.run.feed_malformed(f"malformed invoke of tool {json.dumps(tool, ensure_ascii=False)}: {error}: {raw_arguments}")
        except PolicyError as e:
            return f"blocked: the runbook supervisor cannot decide this call ({e})"
        return f"blocked by the runbook: {a.explanation}"

    def record(self, tool: str, result: Any, is_error: bool, call_id: str) -> Optional[str]:
        """Feeds the tool's result; None when recorded, else what the model is told instead of it."""
        try:
            self.run.result(tool, result, is_error=is_error, call_id=call_id)
        except PolicyError as e:
            # A result that cannot be recorded is not handed to the model: every event is on the record first.
            return f"blocked: the runbook supervisor cannot record this call's result ({e})"
        return None

    def wrap(self, tool: FunctionTool) -> FunctionTool:
        name = tool.qualified_name
        # The tool as given, but letting its exceptions through, so they are recorded before its own
        # failure policy turns them into the model's text (re-applied below, as the SDK's invoker does).
        inner = copy.copy(tool)
        set_function_tool_failure_error_function(inner, None)
        # Only the SDK's own invokers (function_tool, MCP, agent.as_tool) apply a failure policy; a
        # FunctionTool built by hand raises, and the run fails, as without the adapter.
        handles_failures = hasattr(tool.on_invoke_tool, "__agents_bind_function_tool__")
        outer = copy.copy(tool)
        supervisor = self

        async def guardrail(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
            ctx = data.context
            call = (name, ctx.tool_arguments)
            # The SDK may run input guardrails twice for one call (before its own approval, and again when
            # the approved call runs): a call allowed and not yet run is not fed again.
            if supervisor.allowed.get(ctx.tool_call_id) != call:
                message = await supervisor.decide(name, ctx.tool_arguments, ctx.tool_call_id)
                if message is not None:
                    return ToolGuardrailFunctionOutput.reject_content(message, output_info={"runbook": "blocked"})
                supervisor.allowed[ctx.tool_call_id] = call
            return ToolGuardrailFunctionOutput.allow(output_info={"runbook": "allowed"})

        async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
            call_id = ctx.tool_call_id
            if supervisor.allowed.pop(call_id, None) != (name, arguments):
                # Reached without the guardrail's allow for these arguments (a path of the SDK that skips
                # input guardrails): decided here.
                message = await supervisor.decide(name, arguments, call_id)
                if message is not None:
                    return message
            try:
                value = await inner.on_invoke_tool(ctx, arguments)
            except asyncio.CancelledError:
                supervisor.record(name, "cancelled (the tool's timeout, or the run was cancelled)", True, call_id)
                raise
            except Exception as e:
                unrecorded = supervisor.record(name, f"{type(e).__name__}: {e}", True, call_id)
                if unrecorded is not None:
                    return unrecorded
                if handles_failures:
                    text = await maybe_invoke_function_tool_failure_error_function(function_tool=outer, context=ctx, error=e)
                    if text is not None:
                        return text
                raise
            unrecorded = supervisor.record(name, _jsonable(value), False, call_id)
            return value if unrecorded is None else unrecorded

        outer.on_invoke_tool = on_invoke_tool
        # Last: the tool's own guardrails may reject first, and then nothing is fed (nothing ran).
        outer.tool_input_guardrails = [*(tool.tool_input_guardrails or []), ToolInputGuardrail(guardrail, name="runbook")]
        return outer


class _EndHooks(AgentHooks[Any]):
    """The agent's own hooks, and at its final answer: ``final_output`` and the end of the run."""

    def __init__(self, supervisor: _Supervisor, inner: Optional[AgentHooks[Any]]) -> None:
        self.supervisor = supervisor
        self.inner = inner

    async def on_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)
        run = self.supervisor.run
        # A broken run has no bundle to finish (run.broken says why); a finished one is left as it is.
        if self.supervisor.end_run and run.broken is None and not run.finished:
            if not run.over:
                run.final_output()
            run.end()

    async def on_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_handoff(self, context: RunContextWrapper[Any], agent: Agent[Any], source: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: Optional[str], input_items: List[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)
