"""Pydantic AI: a toolset wrapper so that every tool call is decided by the policy module first.

::

    import runbook_policy as rp
    from runbook_policy.pydantic_ai import RunbookToolset, coverage
    from pydantic_ai import Agent, FunctionToolset

    policy = rp.load()
    run = rp.Run.create(policy, "runbook.yaml", adapter="pydantic-ai", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage(every_toolset_wrapped=True))
    tools = RunbookToolset(FunctionToolset([read_file, deploy]), run=run, approve=ask_a_human)
    result = await Agent(model, toolsets=[tools]).run("ship the hotfix")
    run.final_output()
    run.end()

For each call the model makes through the wrapped toolset (:meth:`RunbookToolset.call_tool`):

- the call (its arguments as JSON, through ``pydantic_core.to_jsonable_python``) is fed to the run as an
  ``invoke`` with the model's tool-call id, before anything runs;
- **allowed**: the wrapped tool runs; its return value is fed as a ``result`` (an exception it raises, as an
  error result, and re-raised);
- **blocked** (``deny`` with a deviation, ``halt``): the tool never runs; the event is recorded and the model
  gets a failed tool return naming the deviation and the module's explanation (``ToolFailed``, see below);
- **needs-approval**: the call is held until ``approve`` (a callback of the embedding program, never the
  agent's) answers; its answer is fed as an approval bound to this call's hash (docs/spec/run.md#approvals-bound-to-a-call) and the call is
  decided again. A callback that raises, times out or is missing blocks the call;
- a call whose arguments are not JSON is fed as a malformed event: recorded, and the run halts
  (``malformed-event``), never an allow. A run that cannot record (``RunBroken``) blocks every call.

**What this adapter cannot see** (seed 000: coverage is complete only if the client routes every tool
through it): tool calls of toolsets that are not wrapped (among them the agent's own ``@agent.tool``
functions and ``tools=[...]``, and toolsets added at ``agent.run(toolsets=...)`` unless wrapped too), and
native tools that the model provider runs itself (web search, code execution: they never reach a toolset).
Claim :data:`runbook_policy.COMPLETE` only when every toolset of the agent is a :class:`RunbookToolset`
and the agent has no native tools; :func:`coverage` says which. Anything else is ``Blind([...])``, and the
module then refuses destructive or irreversible work (``coverage-incomplete``). The model's final answer is
not a tool call either: the embedding program feeds it (``run.final_output()``) and ends the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ._jsonable import jsonable as _jsonable
from ._run import Approver, Run
from ._types import COMPLETE, Blind, Coverage, PolicyError

ADAPTER = "pydantic-ai"

#: What the wrapper cannot see when some toolset of the agent is not wrapped.
UNWRAPPED_TOOLSETS = "tools-outside-wrapped-toolsets"
#: What it cannot see when the agent has native tools (run by the model provider).
NATIVE_TOOLS = "native-tools"


def coverage(*, every_toolset_wrapped: bool, native_tools: bool = False) -> Coverage:
    """The coverage to claim for a run supervised through :class:`RunbookToolset`: complete only when every
    toolset of the agent is wrapped and the agent has no native tools; else what is out of sight."""
    blind = ([] if every_toolset_wrapped else [UNWRAPPED_TOOLSETS]) + ([NATIVE_TOOLS] if native_tools else [])
    return Blind(blind) if blind else COMPLETE


@dataclass
class RunbookToolset(WrapperToolset[Any]):
    """Wraps a toolset so that the runbook's policy module decides every call first (see the module)."""

    run: Run = field(kw_only=True)
    """The supervised run (``Run.create(..., adapter="pydantic-ai")``)."""
    approve: Optional[Approver] = field(default=None, kw_only=True)
    """The embedding program's approval callback for gated calls; without one they stay blocked."""
    approval_timeout: Optional[float] = field(default=None, kw_only=True)
    """Seconds to wait for ``approve`` before the call is blocked (None: as long as it takes)."""

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        call_id = ctx.tool_call_id
        arguments = _jsonable(tool_args)
        try:
            gated = await self.run.invoke_with_approval(name, arguments, call_id=call_id, approve=self.approve, timeout=self.approval_timeout)
        except PolicyError as e:
            # The run cannot decide or record (broken, trapped, sealed): nothing runs unrecorded.
            raise ToolFailed(f"blocked: the runbook supervisor cannot decide this call ({e})") from None
        if not gated.allowed:
            # ToolFailed, not ModelRetry: the model gets a failed tool return with the deviation and the
            # module's sentence, and can go on (take the step the runbook allows, or stop). A ModelRetry
            # would ask it to repeat the very call that was refused, and spend the tool's retry budget, which
            # ends the whole agent run with an error after one or two blocked calls.
            raise ToolFailed(f"blocked by the runbook: {gated.message}")
        try:
            value = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except (CallDeferred, ApprovalRequired):
            raise  # Pydantic AI's own deferral: the tool did not run, so there is no result to record
        except (ModelRetry, ToolFailed) as e:
            self._record_result(name, e.message, True, call_id)
            raise
        except Exception as e:
            self._record_result(name, f"{type(e).__name__}: {e}", True, call_id)
            raise
        self._record_result(name, _jsonable(value), False, call_id)
        return value

    def _record_result(self, name: str, result: Any, is_error: bool, call_id: Optional[str]) -> None:
        try:
            self.run.result(name, result, is_error=is_error, call_id=call_id)
        except PolicyError as e:
            # A result that cannot be recorded is not handed to the model: every event is on the record first.
            raise ToolFailed(f"blocked: the runbook supervisor cannot record this call's result ({e})") from None
