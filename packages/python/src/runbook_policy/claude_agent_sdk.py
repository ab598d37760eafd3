"""Supervise a Claude Agent SDK agent loop with a runbook, in the program's own process.

The Claude Agent SDK (``pip install claude-agent-sdk``) runs the Claude Code agent loop and calls back
into the program around every tool call. This module answers those callbacks from a :class:`~runbook_policy.Run`,
so that every tool call the loop makes is decided by the policy module first and recorded in the run's
bundle (which ``runbook-host verify`` checks)::

    import runbook_policy as rp
    from runbook_policy.claude_agent_sdk import ApprovalAnswer, create_run, end_run, runbook_hooks

    async def approve(request):                    # the embedding program's channel to a person
        return ApprovalAnswer(approver="alice", granted=await ask_alice(request))

    run = create_run(rp.load(), "runbook.yaml", agent="deploy-bot")
    options = ClaudeAgentOptions(hooks=runbook_hooks(run, approve=approve), allowed_tools=["Bash"])
    async for message in query(prompt="...", options=options):
        ...
    outcome = end_run(run)                         # a no-op when the Stop hook already ended it

What each hook does (every callback is installed with ``on_failure="block"``):

- **PreToolUse** feeds ``invoke {tool: tool_name, arguments: tool_input, call_id: tool_use_id}``. The
  tool name is the SDK's own (``Bash``, ``Read``, ``mcp__server__tool``). ``allow`` answers ``{}``: no
  opinion, so the client's own permission rules (``allowed_tools``, ``permission_mode``,
  ``can_use_tool``) stay the outer boundary, as docs/spec/adapters.md#adapter-duties says of the hook. ``deny`` and ``halt``
  answer ``permissionDecision: "deny"`` with the module's explanation as the reason the model reads.
  ``needs-approval`` holds the call (:meth:`runbook_policy.Run.invoke_with_approval`): the ``approve``
  callback (the embedding program's, never the agent's; sync ones run in a worker thread) gets an
  :class:`~runbook_policy.ApprovalRequest`; its :class:`~runbook_policy.ApprovalAnswer` is fed as an
  ``approval`` bound to that call's hash (``call_sha256`` of the tool and its input), and a granted,
  accepted approval is followed by the same ``invoke`` again, which the module now decides. No callback, a
  refusal, an approval the module does not accept, a callback that raises or answers something else, or no
  answer within ``approval_timeout`` seconds: the call is denied (and can be retried). A run the module
  halted answers every later call ``halt`` (recorded, denied); once the run has ended, every call is denied.
- **PostToolUse** feeds ``result {tool, result: tool_response, is_error, call_id}`` (``is_error`` from
  the response's ``is_error``/``isError``/``success: false``, as the Rust hook reads it). A ``halt``
  answers ``decision: "block"`` with the reason, so the model is told to stop.
- **PostToolUseFailure** (in both SDKs this module supports: claude-agent-sdk 0.2.189, and
  @anthropic-ai/claude-agent-sdk 0.3.333 for the TypeScript twin) feeds ``result`` with the failure's
  ``error`` text as the result and ``is_error: true``.
- **Stop** means: the main agent ended its turn with an answer. The adapter records ``final_output``
  (unless the run is already over), then, when the run stands at a terminal of the runbook or the module
  ended it, ends the run (``end normal``: report and receipt written). Away from a terminal the run stays
  open, because the same session may be given another prompt (``ClaudeSDKClient``) and go on with it; the
  program ends it when the session stops, with :func:`end_run` (outcome ``incomplete`` then). With
  ``keep_working=True`` such a Stop is blocked once, telling the model to keep working towards a terminal
  (as the Rust hook's ``--keep-working``). ``SubagentStop`` is not a stop of the run and is not hooked; a
  sub-agent's tool calls go through the same PreToolUse/PostToolUse hooks and are decided in the same run.
  ``SessionEnd`` is not used: the CLI does not deliver it to SDK callbacks when ``query()`` ends
  (observed with both SDKs), hence :func:`end_run`.

A hook input that is not of the shape its event promises (no ``tool_name`` string, a ``tool_input`` that
is not an object, a PostToolUse without ``tool_response``, ...) is recorded with
:meth:`runbook_policy.Run.feed_malformed`: a line that is no event, naming the hook, what is wrong and the
input as JSON (less ``cwd`` and ``transcript_path``, which name this machine's files), which the module
decides ``halt`` with reason ``malformed-event``; the call is denied, and so is every later one: never an
allow.

A callback that raises blocks the tool: the matchers are installed with ``on_failure="block"``, with which
the SDK blocks the action when a callback raises, returns ``None`` or returns an answer the CLI rejects
(measured against the real CLI, see the tests). A callback that does not answer within the matcher's
``timeout`` is blocked by the CLI whatever ``on_failure`` says, and its task is cancelled; the adapter then
feeds nothing more for that call. The SDK ignores ``on_failure`` on Stop. A CLI too old to honour
``on_failure`` (or a session already running that did not register these hooks) makes the SDK raise
``CLIConnectionError`` when it connects: the loop does not start unguarded.

**Coverage.** The hooks see every tool call the agent loop makes, the shell and MCP tools included, and
those of its sub-agents: :data:`COVERAGE` is complete, as for the Rust Claude Code hook (the SDK runs the
same CLI). What they cannot see, and so what a runbook cannot govern through them:

- what is not a tool call of the loop: the embedding program's own code, the CLI's own housekeeping (its
  side requests, compaction, the memory and settings files it reads at start), command hooks that settings
  files (``setting_sources``) make the CLI run;
- what an allowed call does beyond its name and input: processes an allowed shell command leaves running,
  an MCP server's own side effects; the module judges the call it is shown, not its consequences;
- an input rewritten after the decision: another PreToolUse hook of the program, or a ``can_use_tool``,
  that answers ``updatedInput`` makes the tool run with arguments the module did not judge (measured: a
  second hook rewriting an allowed ``echo hello`` into ``touch pwned`` runs ``touch pwned``, and only
  PostToolUse shows the new input). Install no such rewriter beside these hooks, or the coverage claim is
  not true;
- a program that does not install these hooks on every session it starts.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Optional, Union

import runbook_policy as rp
from runbook_policy import ApprovalAnswer, ApprovalRequest, Approver

if TYPE_CHECKING:  # pragma: no cover
    from runbook_policy import Answer, Run

__all__ = [
    "ADAPTER",
    "COVERAGE",
    "DEFAULT_APPROVAL_TIMEOUT",
    "DEFAULT_HOOK_TIMEOUT",
    "ApprovalAnswer",
    "ApprovalRequest",
    "RunbookHooks",
    "create_run",
    "end_run",
    "runbook_hooks",
]

log = logging.getLogger(__name__)

#: The adapter's name in run.json.
ADAPTER = "claude-agent-sdk"

#: The claim's coverage: the hooks see every tool call of the loop (see the module's docstring for what
#: they cannot see).
COVERAGE = rp.COMPLETE

#: How long a gated call waits for the approval callback, in seconds (the PreToolUse matcher's timeout is
#: set above it, so the adapter answers before the CLI gives up on the callback).
DEFAULT_APPROVAL_TIMEOUT = 300.0

#: The matchers' timeout, in seconds, for hooks that do not wait for a person.
DEFAULT_HOOK_TIMEOUT = 30.0


def create_run(policy: "rp.Policy", document: Any, *, agent: str = ADAPTER, profile: Any = rp.Profile.R2, **kwargs: Any) -> "Run":
    """:meth:`runbook_policy.Run.create` with this adapter's name and coverage claim.

    ``agent`` is the agent's identity in the claim (an approval by that identity is refused). Other keyword
    arguments (``runs_root``, ``allowlist``, ``risk_ceiling``, ``reference``, ``available``, ``run_id``) are
    passed on; ``risk_ceiling`` defaults to irreversible.
    """
    kwargs.setdefault("risk_ceiling", rp.Risk.IRREVERSIBLE)
    return rp.Run.create(policy, document, agent=agent, profile=profile, coverage=COVERAGE, adapter=ADAPTER, **kwargs)


def end_run(run: "Run", reason: Union[rp.EndReason, str] = rp.EndReason.NORMAL) -> rp.Outcome:
    """Ends ``run`` when the session stopped with the run still open (away from a terminal); returns the
    outcome. A run the Stop hook already ended is left as it is, and its outcome returned."""
    return run.end(reason)


def runbook_hooks(
    run: "Run",
    *,
    approve: Optional[Approver] = None,
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
    keep_working: bool = False,
) -> dict:
    """The ``hooks`` of ``ClaudeAgentOptions`` that supervise the loop with ``run``.

    ``approve`` answers gated calls (sync or async, given an :class:`~runbook_policy.ApprovalRequest`,
    answering an :class:`~runbook_policy.ApprovalAnswer`); ``approval_timeout`` bounds that wait, in
    seconds; ``hook_timeout`` is the other matchers' timeout. Every matcher matches every tool and is set to
    ``on_failure="block"``.
    """
    return RunbookHooks(run, approve=approve, approval_timeout=approval_timeout, hook_timeout=hook_timeout, keep_working=keep_working).matchers()


def _deny(reason: str) -> dict:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}}


def _block(reason: str) -> dict:
    return {"decision": "block", "reason": reason}


def _is_error(response: Any) -> bool:
    """Whether a tool's response reports an error: ``is_error``/``isError``, or ``success: false``
    (absent means no error), as the Rust hook reads Claude Code's responses."""
    if not isinstance(response, Mapping):
        return False
    for key in ("is_error", "isError"):
        if isinstance(response.get(key), bool):
            return response[key]
    if isinstance(response.get("success"), bool):
        return not response["success"]
    return False


class RunbookHooks:
    """The four hook callbacks bound to one run (see the module's docstring for what each does).

    :meth:`matchers` gives them as ``ClaudeAgentOptions.hooks``. Each callback is ``async (input,
    tool_use_id, context) -> dict`` as the SDK calls it, usable on its own too.
    """

    def __init__(
        self,
        run: "Run",
        *,
        approve: Optional[Approver] = None,
        approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
        hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
        keep_working: bool = False,
    ) -> None:
        if not approval_timeout > 0 or not hook_timeout > 0:
            raise ValueError("timeouts must be positive")
        self.run = run
        self.approve = approve
        self.approval_timeout = float(approval_timeout)
        self.hook_timeout = float(hook_timeout)
        self.keep_working = keep_working

    def matchers(self) -> dict:
        """``{event: [HookMatcher]}`` for PreToolUse, PostToolUse, PostToolUseFailure and Stop."""
        from claude_agent_sdk import HookMatcher

        # The PreToolUse wait covers the approval: the CLI gives up on a callback after its timeout.
        pre_timeout = self.approval_timeout + self.hook_timeout if self.approve is not None else self.hook_timeout

        def matcher(callback: Callable[..., Awaitable[dict]], timeout: float) -> list:
            return [HookMatcher(matcher=None, hooks=[callback], timeout=timeout, on_failure="block")]

        return {
            "PreToolUse": matcher(self.pre_tool_use, pre_timeout),
            "PostToolUse": matcher(self.post_tool_use, self.hook_timeout),
            "PostToolUseFailure": matcher(self.post_tool_use_failure, self.hook_timeout),
            "Stop": matcher(self.stop, self.hook_timeout),
        }

    def _finished(self) -> str:
        return f"runbook: run {self.run.run_id} is over and its evidence is sealed; no further tool call runs in this session."

    def _malformed(self, kind: str, hook_input: Any, why: str) -> "Answer":
        """Records a malformed hook input (:meth:`runbook_policy.Run.feed_malformed`): the line names the
        hook, why the input is malformed and the input itself, so the module halts the run."""
        log.warning("runbook: a malformed %s hook input (%s) is recorded as a halt", kind, why)
        return self.run.feed_malformed(f"malformed Claude Agent SDK {kind} hook input ({why}): {_payload(hook_input)}")

    # -- the callbacks ---------------------------------------------------------------------------------

    async def pre_tool_use(self, hook_input: Any, tool_use_id: Optional[str], context: Any) -> dict:
        """PreToolUse: decide the call; hold a gated one for the approval callback."""
        run = self.run
        if run.finished:
            return _deny(self._finished())
        fields = _tool_fields(hook_input, tool_use_id)
        if isinstance(fields, str):
            a = self._malformed("PreToolUse", hook_input, fields)
            return _deny(f"runbook: {a.explanation} (the hook input was malformed: {fields}); this call is blocked.")
        tool, arguments, call_id = fields
        g = await run.invoke_with_approval(tool, arguments, call_id=call_id, approve=self.approve, timeout=self.approval_timeout)
        if g.allowed:
            return {}
        if g.answer.kind is rp.DecisionKind.NEEDS_APPROVAL:
            return _deny(
                f"runbook: {g.message} `{tool}` with these exact arguments (call sha256 {g.answer.call_sha256}) needs the "
                "approval of a person through the program that runs this agent; retry the same call once it is approved, "
                "and do not try another way around the gate."
            )
        return _deny(f"runbook: {g.message}")

    async def post_tool_use(self, hook_input: Any, tool_use_id: Optional[str], context: Any) -> dict:
        """PostToolUse: the call's result."""
        return self._result("PostToolUse", hook_input, tool_use_id)

    async def post_tool_use_failure(self, hook_input: Any, tool_use_id: Optional[str], context: Any) -> dict:
        """PostToolUseFailure: the call failed; its ``error`` text is the result, with ``is_error``."""
        return self._result("PostToolUseFailure", hook_input, tool_use_id)

    def _result(self, kind: str, hook_input: Any, tool_use_id: Optional[str]) -> dict:
        run = self.run
        if run.finished:
            return _block(self._finished())
        failed = kind == "PostToolUseFailure"
        key = "error" if failed else "tool_response"
        fields = _tool_fields(hook_input, tool_use_id)
        if isinstance(fields, str):
            why = fields
        elif key not in hook_input:
            why = f"no `{key}`"
        elif failed and not isinstance(hook_input[key], str):
            why = "`error` is not text"
        else:
            why = ""
        if why:
            a = self._malformed(kind, hook_input, why)
            return _block(f"runbook: {a.explanation} (the hook input was malformed: {why}). Stop and tell the user.")
        tool, _arguments, call_id = fields
        result = hook_input[key]
        a = run.result(tool, result, is_error=failed or _is_error(result), call_id=call_id)
        if a.kind is rp.DecisionKind.HALT:
            outcome = a.state.outcome
            said = f" The outcome is {outcome}." if outcome is not None else ""
            return _block(f"runbook: {a.explanation}{said} Stop and tell the user.")
        return {}

    async def stop(self, hook_input: Any, tool_use_id: Optional[str], context: Any) -> dict:
        """Stop: the agent's answer is the final output; at a terminal (or once over) the run ends."""
        run = self.run
        if run.finished:
            return {}
        if not isinstance(hook_input, Mapping):
            self._malformed("Stop", hook_input, "not an object")
        if not run.over:
            run.tick_if_due()
        if not run.over:
            run.final_output()
        st = run.state()
        if st.at_terminal or run.over:
            outcome = run.end(rp.EndReason.NORMAL)
            return {"systemMessage": f"runbook: run {run.run_id} ended: {outcome}."}
        msg = f"runbook: run {run.run_id} is at step `{st.step}`, not at a terminal of the runbook, so the procedure is incomplete"
        again = bool(hook_input.get("stop_hook_active")) if isinstance(hook_input, Mapping) else True
        if self.keep_working and not again:
            return _block(f"{msg}. Keep working towards a terminal of the runbook.")
        return {"systemMessage": f"{msg}."}


#: Keys of a hook input that name this machine's files (the session's working directory, its transcript):
#: left out of what is recorded of a malformed input.
_MACHINE_KEYS = ("cwd", "transcript_path", "agent_transcript_path")


def _payload(hook_input: Any) -> str:
    """A hook input as recorded when it is malformed: compact JSON, as the JavaScript twin writes it (values
    that are not JSON as their ``repr``), or its ``repr`` when it cannot be encoded at all; the keys that
    name this machine's files left out."""
    if isinstance(hook_input, Mapping):
        hook_input = {k: v for k, v in hook_input.items() if k not in _MACHINE_KEYS}
    try:
        return json.dumps(hook_input, ensure_ascii=False, separators=(",", ":"), default=repr)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return repr(hook_input)
    except Exception:  # noqa: BLE001 - the input is recorded as malformed either way
        return f"<a {type(hook_input).__name__} that cannot be shown>"


def _tool_fields(hook_input: Any, tool_use_id: Optional[str]) -> Union[str, tuple]:
    """``(tool, arguments, call_id)`` of a tool hook's input, or why it is malformed."""
    if not isinstance(hook_input, Mapping):
        return "not an object"
    tool = hook_input.get("tool_name")
    if not isinstance(tool, str) or not tool:
        return "no `tool_name` string"
    arguments = hook_input.get("tool_input")
    if not isinstance(arguments, Mapping):
        return "`tool_input` is not an object"
    call_id = hook_input.get("tool_use_id", tool_use_id)
    if call_id is not None and not isinstance(call_id, str):
        return "`tool_use_id` is not a string"
    return tool, dict(arguments), call_id
