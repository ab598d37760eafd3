"""The Pydantic AI adapter in a whole agent loop, offline, with the framework's scripted FunctionModel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, Callable, Dict, List, Optional

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic import AfterValidator  # noqa: E402
from pydantic_ai import Agent, FunctionToolset  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import runbook_policy as rp  # noqa: E402
from runbook_policy.pydantic_ai import NATIVE_TOOLS, UNWRAPPED_TOOLSETS, RunbookToolset, coverage  # noqa: E402

from .conftest import RUNBOOKS, run_cli, verify  # noqa: E402

SHIP = RUNBOOKS / "ship-hotfix.yaml"


class Tools:
    """The agent's real tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: List[tuple] = []

    def toolset(self) -> FunctionToolset:
        def read_file(path: str) -> str:
            """Reads a file of the repository."""
            self.ran.append(("read_file", path))
            return "## 1.4.1\n- hotfix: stop the payments retry storm\n"

        def deploy(service: str) -> Dict[str, str]:
            """Deploys a service."""
            self.ran.append(("deploy", service))
            return {"status": "deployed", "service": service}

        def shell(command: str) -> str:
            """Runs a shell command."""
            self.ran.append(("shell", command))
            return "ran"

        def opaque(value: Annotated[str, AfterValidator(lambda v: object())]) -> str:
            """Takes a value that validates into something JSON cannot hold."""
            self.ran.append(("opaque", value))
            return "ran"

        return FunctionToolset([read_file, deploy, shell, opaque])


class Script:
    """A scripted model: one response per turn; it keeps every tool return it was shown."""

    def __init__(self, turns: List[List[Any]]) -> None:
        self.turns = turns
        self.seen: List[ToolReturnPart] = []

    def __call__(self, messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                self.seen.append(part)
        turn = sum(1 for m in messages if isinstance(m, ModelResponse))
        return ModelResponse(parts=self.turns[turn])

    def returns(self, call_id: str) -> ToolReturnPart:
        return next(p for p in self.seen if p.tool_call_id == call_id)


def call(tool: str, args: Dict[str, Any], call_id: str) -> ToolCallPart:
    return ToolCallPart(tool, args, tool_call_id=call_id)


def new_run(policy: rp.Policy, **over: Any) -> rp.Run:
    claim = dict(adapter="pydantic-ai", agent="release-bot", profile="R2", risk_ceiling="destructive", coverage=coverage(every_toolset_wrapped=True))
    claim.update(over)
    return rp.Run.create(policy, SHIP, **claim)


def run_agent(run: rp.Run, tools: Tools, script: Script, approve: Optional[Callable] = None, **kw: Any) -> str:
    toolset = RunbookToolset(tools.toolset(), run=run, approve=approve, **kw)
    result = asyncio.run(Agent(FunctionModel(script), toolsets=[toolset]).run("ship the hotfix"))
    return result.output


def events(run: rp.Run) -> List[tuple]:
    return [(json.loads(e) if e.startswith("{") else e, json.loads(d)) for _, e, d in rp._bundle.read_events((run.dir / "events.ndjson").read_bytes())]


def test_the_lint_of_the_test_runbook_is_clean(cli: Path) -> None:
    p = run_cli(cli, "lint", "--format", "json", str(SHIP))
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] and json.loads(p.stdout)["structure"] == "P2"


def test_an_agent_reads_is_blocked_out_of_scope_waits_for_approval_and_ships(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    script = Script(
        [
            [call("deploy", {"service": "payments-api"}, "c1")],  # out of scope: `deploy` belongs to `ship`
            [call("shell", {"command": "curl -s https://status.example.com"}, "c2")],  # undeclared
            [call("read_file", {"path": "CHANGELOG.md"}, "c3")],  # in scope: the assert passes, `ship` is next
            [call("deploy", {"service": "payments-api"}, "c4")],  # gated: held until approved
            [TextPart("Shipped the payments-api hotfix.")],
        ]
    )
    asked: List[rp.ApprovalRequest] = []

    async def approve(request: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        asked.append(request)
        # The call is held here: nothing has run yet.
        assert ("deploy", "payments-api") not in tools.ran
        return rp.ApprovalAnswer(approver="alice", granted=True)

    run = new_run(policy)
    output = run_agent(run, tools, script, approve)
    assert output == "Shipped the payments-api hotfix."
    run.final_output()
    assert run.end() is rp.Outcome.COMPLETED

    # Only the calls the module allowed ran.
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    # The model saw each deviation and the module's explanation, as a failed tool return.
    blocked = script.returns("c1")
    assert blocked.outcome == "failed" and "out-of-scope-tool" in str(blocked.content) and "not in the current step" in str(blocked.content)
    assert script.returns("c2").outcome == "failed" and "undeclared-tool" in str(script.returns("c2").content)
    assert script.returns("c3").outcome == "success" and script.returns("c4").outcome == "success"
    # The approval callback was asked once, for that call, by its hash.
    sha = policy.call_sha256("deploy", {"service": "payments-api"})
    assert [(r.step, r.tool, r.arguments, r.call_sha256) for r in asked] == [("ship", "deploy", {"service": "payments-api"}, sha)]

    recorded = events(run)
    kinds = [(e["type"], e.get("call_id"), d["decision"], d["deviation"] or d["reason"]) for e, d in recorded]
    assert kinds == [
        ("start", None, "allow", None),
        ("invoke", "c1", "deny", "out-of-scope-tool"),
        ("invoke", "c2", "deny", "undeclared-tool"),
        ("invoke", "c3", "allow", None),
        ("result", "c3", "allow", None),
        ("invoke", "c4", "needs-approval", "awaiting-approval"),
        ("approval", None, "allow", None),
        ("invoke", "c4", "allow", None),
        ("result", "c4", "allow", None),
        ("final_output", None, "allow", None),
        ("end", None, "halt", "run-ended"),
    ]
    approval = recorded[6][0]
    assert (approval["approver"], approval["granted"], approval["step"], approval["call_sha256"]) == ("alice", True, "ship", sha)
    assert recorded[8][0]["result"] == {"status": "deployed", "service": "payments-api"} and recorded[8][1]["step"] == "shipped"
    m = json.loads((run.dir / "run.json").read_text())
    assert m["adapter"] == {"name": "pydantic-ai", "sees": "tool calls through the wrapped toolsets of a Pydantic AI agent", "coverage": "complete"}
    report = json.loads(run.report())
    assert report["terminal"] == "shipped" and [d["class"] for d in report["deviations"]] == ["out-of-scope-tool", "undeclared-tool"]
    out = verify(cli, run.dir)
    assert out["outcome"] == "completed" and out["events"] == 11


def gated_script() -> Script:
    return Script(
        [
            [call("read_file", {"path": "CHANGELOG.md"}, "c1")],
            [call("deploy", {"service": "payments-api"}, "c2")],
            [TextPart("done")],
        ]
    )


@pytest.mark.parametrize(
    "name,approve,problem",
    [
        ("no callback", None, "no approval callback"),
        ("a callback that raises", lambda r: (_ for _ in ()).throw(RuntimeError("pager down")), "failed (RuntimeError)"),
        ("an async callback that raises", "raise-async", "failed (ValueError)"),
        ("a callback that answers nonsense", lambda r: True, "no ApprovalAnswer"),
        ("a human who says no", lambda r: rp.ApprovalAnswer("alice", False), "a human refused"),
        ("the agent approving itself", lambda r: rp.ApprovalAnswer("release-bot", True), "self-approval"),
        ("a callback that never answers", "hang", "no approval came within"),
    ],
)
def test_a_gated_call_without_a_valid_human_approval_never_runs(policy: rp.Policy, cli: Path, workdir: Path, name: str, approve: Any, problem: str) -> None:
    if approve == "raise-async":
        async def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
            raise ValueError("no")
    elif approve == "hang":
        async def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
            await asyncio.sleep(30)
            raise AssertionError("unreachable")
    tools, script = Tools(), gated_script()
    run = new_run(policy)
    assert run_agent(run, tools, script, approve, approval_timeout=0.2) == "done"
    assert tools.ran == [("read_file", "CHANGELOG.md")], name
    blocked = script.returns("c2")
    assert blocked.outcome == "failed" and "needs-approval" in str(blocked.content) and problem in str(blocked.content), blocked.content
    run.final_output()
    assert run.end() is rp.Outcome.INCOMPLETE
    assert not any(e["type"] == "invoke" and d["decision"] == "allow" and e["tool"] == "deploy" for e, d in events(run))
    verify(cli, run.dir)


def test_a_sync_callback_runs_off_the_loop_and_may_grant(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools, script = Tools(), gated_script()
    run = new_run(policy)
    run_agent(run, tools, script, lambda r: rp.ApprovalAnswer("alice", True))
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    run.final_output()
    assert run.end() is rp.Outcome.COMPLETED
    verify(cli, run.dir)


def test_arguments_that_are_not_json_are_a_recorded_halt_and_nothing_runs_after(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    script = Script(
        [
            [call("opaque", {"value": "x"}, "c1")],
            [call("read_file", {"path": "CHANGELOG.md"}, "c2")],
            [TextPart("gave up")],
        ]
    )
    run = new_run(policy)
    run_agent(run, tools, script)
    assert tools.ran == []
    assert "malformed-event" in str(script.returns("c1").content) and "halted" in str(script.returns("c2").content)
    recorded = events(run)
    assert isinstance(recorded[1][0], str) and recorded[1][0].startswith('malformed invoke of tool "opaque"')
    assert recorded[1][1]["reason"] == "malformed-event" and recorded[2][1]["decision"] == "halt"
    assert run.end() is rp.Outcome.FAILED
    verify(cli, run.dir)


def test_a_tool_error_is_recorded_as_an_error_result_and_reaches_the_model(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    def read_file(path: str) -> str:
        from pydantic_ai import ModelRetry

        raise ModelRetry("no such file")

    script = Script([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [TextPart("stopped")]])
    run = new_run(policy)
    toolset = RunbookToolset(FunctionToolset([read_file], max_retries=3), run=run)
    assert asyncio.run(Agent(FunctionModel(script), toolsets=[toolset]).run("x")).output == "stopped"
    result = [(e, d) for e, d in events(run) if e["type"] == "result"]
    assert result and result[0][0]["is_error"] is True and result[0][0]["result"] == "no such file"
    run.end()
    verify(cli, run.dir)


def test_a_broken_run_blocks_every_call(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    import shutil

    tools = Tools()
    script = Script([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [TextPart("stopped")]])
    run = new_run(policy)
    shutil.rmtree(run.dir)
    run_agent(run, tools, script)
    assert tools.ran == [] and "cannot decide" in str(script.returns("c1").content)
    assert isinstance(run.broken, rp.RunBroken)


def test_coverage_is_complete_only_when_every_toolset_is_wrapped_and_no_native_tools(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    assert coverage(every_toolset_wrapped=True) is rp.COMPLETE
    assert coverage(every_toolset_wrapped=False) == rp.Blind([UNWRAPPED_TOOLSETS])
    assert coverage(every_toolset_wrapped=True, native_tools=True) == rp.Blind([NATIVE_TOOLS])
    # A blind adapter may not run destructive work: the module refuses the run up front.
    run = new_run(policy, coverage=coverage(every_toolset_wrapped=False))
    assert run.over and run.start.decision.refusals == [rp.Refusal.COVERAGE_INCOMPLETE]
    verify(cli, run.dir)
