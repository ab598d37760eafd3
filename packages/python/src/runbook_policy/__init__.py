"""runbook_policy: the runbook policy component in your own Python process.

The same WebAssembly component that ``runbook-host`` (the CLI, the MCP proxy, the Claude Code hook) and the
browser playground run, loaded with wasmtime-py and checked against the sha256 this package was built
with, so every host decides the same way, byte for byte.

::

    import runbook_policy as rp

    policy = rp.load()
    print(policy.lint(open("runbook.yaml", "rb").read()).ok)
    with rp.Run.create(policy, "runbook.yaml", agent="my-agent", profile="R2",
                       risk_ceiling="destructive", coverage=rp.COMPLETE) as run:
        answer = run.invoke("read_file", {"path": "CHANGELOG.md"}, call_id="c1")
        ...

``Run`` writes a run bundle under ``.runbook/runs/`` that ``runbook-host verify`` checks (and
:func:`verify`, with the same module, but for signed approvals). The adapters for
agent frameworks are modules of their own, each needing its framework (an optional extra of the same
name): :mod:`runbook_policy.pydantic_ai`, :mod:`runbook_policy.claude_agent_sdk`,
:mod:`runbook_policy.openai_agents`, :mod:`runbook_policy.langgraph` and :mod:`runbook_policy.google_adk`.
"""

from ._policy import COMPONENT_SHA256, FUEL_PER_CALL, MEMORY_CAP, Policy, Session, load
from ._run import HOST_NAME, Answer, ApprovalAnswer, ApprovalRequest, Approver, Gated, Guard, Run
from ._types import (
    COMPLETE,
    Advance,
    Approval,
    Blind,
    ComponentMismatch,
    Coverage,
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
    Phase,
    PolicyError,
    Profile,
    Reason,
    Recorded,
    Refusal,
    Replayed,
    Result,
    Risk,
    RunBroken,
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
)
from ._verify import verify

__version__ = "0.2.0"

__all__ = [
    "COMPLETE",
    "COMPONENT_SHA256",
    "FUEL_PER_CALL",
    "HOST_NAME",
    "MEMORY_CAP",
    "Advance",
    "Answer",
    "Approval",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "Blind",
    "ComponentMismatch",
    "Coverage",
    "Decision",
    "DecisionKind",
    "Deviation",
    "Effect",
    "EffectOp",
    "End",
    "EndReason",
    "Event",
    "FinalOutput",
    "Finding",
    "Gated",
    "Guard",
    "InvalidDocument",
    "Invoke",
    "LintReport",
    "ModuleTrap",
    "Outcome",
    "Phase",
    "Policy",
    "PolicyError",
    "Profile",
    "Reason",
    "Recorded",
    "Refusal",
    "Replayed",
    "Result",
    "Risk",
    "Run",
    "RunBroken",
    "RunState",
    "RunTampered",
    "Session",
    "Severity",
    "SignedAnswer",
    "SnapshotRefused",
    "Start",
    "Structure",
    "Tick",
    "Verdict",
    "Verification",
    "load",
    "verify",
]
