"""The OpenAI Agents SDK adapter in whole agent loops, offline: ``Runner.run`` with the SDK's own scripted
model (``agents.testing.ScriptedModel``), tracing off. The runbook is tests/runbooks/ship-hotfix.yaml;
every bundle a test finishes is checked with ``$RUNBOOK_HOST verify``."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

import agents  # noqa: E402
from agents import Agent, AgentHooks, FunctionTool, Runner, WebSearchTool, function_tool, handoff  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import runbook_policy as rp  # noqa: E402
from runbook_policy.openai_agents import (  # noqa: E402
    AGENTS_AS_TOOLS,
    HANDOFF_OBJECTS,
    HOSTED_TOOLS,
    coverage,
    supervise,
)

from .conftest import RUNBOOKS, verify  # noqa: E402

agents.set_tracing_disabled(True)

SHIP = RUNBOOKS / "ship-hotfix.yaml"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "openai_agents.py"
CHANGELOG = "## 1.4.1\n- hotfix: stop the payments retry storm\n"
SDK_TOOL_ERROR = "An error occurred while running the tool. Please try again."


class Tools:
    """The agent's real tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: List[tuple] = []

        @function_tool
        def read_file(path: str) -> str:
            """Reads a file of the repository."""
            self.ran.append(("read_file", path))
            return CHANGELOG

        @function_tool
        def deploy(service: str) -> Dict[str, str]:
            """Deploys a service."""
            self.ran.append(("deploy", service))
            return {"status": "deployed", "service": service}

        @function_tool
        def shell(command: str) -> str:
            """Runs a shell command."""
            self.ran.append(("shell", command))
            return "ran"

        self.all = [read_file, deploy, shell]


class Hooks(AgentHooks[Any]):
    """The agent's own hooks: the adapter must keep them."""

    def __init__(self) -> None:
        self.seen: List[tuple] = []

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen.append(("tool_start", tool.name))

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        self.seen.append(("end", output))


def call(tool: str, args: Any, call_id: str) -> Any:
    return function_call(tool, args, call_id=call_id)


def shown(model: ScriptedModel) -> Dict[str, Any]:
    """What the model was shown as each call's output, by call id."""
    out: Dict[str, Any] = {}
    for c in model.calls:
        for item in c.input if isinstance(c.input, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                out[item["call_id"]] = item["output"]
    return out


def new_run(policy: rp.Policy, **over: Any) -> rp.Run:
    claim = dict(adapter="openai-agents", agent="release-bot", profile="R2", risk_ceiling="destructive", coverage=rp.COMPLETE)
    claim.update(over)
    return rp.Run.create(policy, SHIP, **claim)


def run_agent(run: rp.Run, tools: List[FunctionTool], model: ScriptedModel, approve: Optional[Callable] = None, **kw: Any) -> Any:
    agent = Agent(name="release-bot", model=model, tools=tools)
    return asyncio.run(Runner.run(supervise(agent, run, approve=approve, **kw), "ship the hotfix"))


def events(run: rp.Run) -> List[tuple]:
    return [(json.loads(e) if e.startswith("{") else e, json.loads(d)) for _, e, d in rp._bundle.read_events((run.dir / "events.ndjson").read_bytes())]


def kinds(run: rp.Run) -> List[tuple]:
    return [(e["type"], e.get("call_id"), d["decision"], d["deviation"] or d["reason"]) for e, d in events(run)]


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("readme_openai_agents", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_example_is_blocked_out_of_scope_waits_for_approval_and_ships(policy: rp.Policy, cli: Path, workdir: Path, capsys: pytest.CaptureFixture) -> None:
    assert len(EXAMPLE.read_text().splitlines()) <= 25
    example = load_example()
    (workdir / "CHANGELOG.md").write_text(CHANGELOG)
    shutil.copy(SHIP, workdir / "runbook.yaml")
    model = ScriptedModel(
        [
            [call("deploy", {"service": "payments-api"}, "c1")],  # out of scope: `deploy` belongs to `ship`
            [call("read_file", {"path": "CHANGELOG.md"}, "c2")],  # in scope: the assert passes, `ship` is next
            [call("deploy", {"service": "payments-api"}, "c3")],  # gated: held until approved
            [assistant_message("Shipped the payments-api hotfix.")],
        ]
    )
    asked: List[rp.ApprovalRequest] = []

    async def approve(request: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        asked.append(request)
        # The call is held here: deploy has not run (no result of it is in the run's events yet).
        lines = (workdir / ".runbook" / "runs" / request.run_id / "events.ndjson").read_text().splitlines()
        assert not any(e["type"] == "result" and e["tool"] == "deploy" for e in (json.loads(l)["event"] for l in lines))
        return rp.ApprovalAnswer(approver="alice", granted=True)

    run = asyncio.run(example.ship_hotfix(model, approve))
    assert capsys.readouterr().out == "Shipped the payments-api hotfix. completed\n"
    model.assert_complete()

    # The model saw the SDK's refusal of c1 with the module's sentence, and the real outputs of the others.
    out = shown(model)
    assert out["c1"].startswith("blocked by the runbook: ") and "out-of-scope-tool" in out["c1"] and "not in the current step" in out["c1"]
    assert out["c2"] == CHANGELOG and json.loads(out["c3"].replace("'", '"')) == {"status": "deployed", "service": "payments-api"}
    sha = policy.call_sha256("deploy", {"service": "payments-api"})
    assert [(r.step, r.tool, r.arguments, r.call_sha256) for r in asked] == [("ship", "deploy", {"service": "payments-api"}, sha)]
    assert kinds(run) == [
        ("start", None, "allow", None),
        ("invoke", "c1", "deny", "out-of-scope-tool"),
        ("invoke", "c2", "allow", None),
        ("result", "c2", "allow", None),
        ("invoke", "c3", "needs-approval", "awaiting-approval"),
        ("approval", None, "allow", None),
        ("invoke", "c3", "allow", None),
        ("result", "c3", "allow", None),
        ("final_output", None, "allow", None),
        ("end", None, "halt", "run-ended"),
    ]
    recorded = events(run)
    assert recorded[3][0]["result"] == CHANGELOG and recorded[7][0]["result"] == {"status": "deployed", "service": "payments-api"}
    assert (recorded[5][0]["approver"], recorded[5][0]["call_sha256"]) == ("alice", sha)
    m = json.loads((run.dir / "run.json").read_text())
    assert m["adapter"] == {"name": "openai-agents", "sees": "tool calls through the wrapped function tools of an OpenAI Agents SDK agent", "coverage": "complete"}
    report = json.loads(run.report())
    assert report["terminal"] == "shipped" and [d["class"] for d in report["deviations"]] == ["out-of-scope-tool"]
    assert verify(cli, run.dir)["outcome"] == "completed"


def test_a_denied_call_never_runs_nor_fires_tool_hooks_and_the_agents_own_hooks_still_run(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools, hooks = Tools(), Hooks()
    model = ScriptedModel(
        [
            [call("shell", {"command": "curl -s https://status.example.com"}, "c1")],  # no capability declares it
            [call("read_file", {"path": "CHANGELOG.md"}, "c2")],
            [assistant_message("stopped before shipping")],
        ]
    )
    agent = Agent(name="release-bot", model=model, tools=tools.all, hooks=hooks)
    run = new_run(policy)
    result = asyncio.run(Runner.run(supervise(agent, run), "ship the hotfix"))
    assert tools.ran == [("read_file", "CHANGELOG.md")]
    assert "undeclared-tool" in shown(model)["c1"]
    # The refusal is the SDK's own (a tool input guardrail that rejected the content): no tool hook fired.
    assert [(r.guardrail.get_name(), r.output.behavior["type"]) for r in result.tool_input_guardrail_results] == [("runbook", "reject_content"), ("runbook", "allow")]
    assert hooks.seen == [("tool_start", "read_file"), ("end", "stopped before shipping")]
    assert agent.tools == tools.all and agent.hooks is hooks  # the agent given is not changed
    # The answer ended the run away from a terminal: incomplete.
    assert run.finished and run.state().outcome is rp.Outcome.INCOMPLETE
    assert verify(cli, run.dir)["outcome"] == "incomplete"


def gated_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [call("read_file", {"path": "CHANGELOG.md"}, "c1")],
            [call("deploy", {"service": "payments-api"}, "c2")],
            [assistant_message("done")],
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
    tools, model = Tools(), gated_model()
    run = new_run(policy)
    assert run_agent(run, tools.all, model, approve, approval_timeout=0.2).final_output == "done"
    assert tools.ran == [("read_file", "CHANGELOG.md")], name
    blocked = shown(model)["c2"]
    assert blocked.startswith("blocked by the runbook: ") and "needs-approval" in blocked and problem in blocked, blocked
    assert run.state().outcome is rp.Outcome.INCOMPLETE
    assert not any(e["type"] == "invoke" and d["decision"] == "allow" and e["tool"] == "deploy" for e, d in events(run))
    verify(cli, run.dir)


def test_a_sync_callback_may_grant_and_the_tools_timeout_does_not_cut_the_wait(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    ran: List[str] = []

    @function_tool
    def read_file(path: str) -> str:
        """Reads a file."""
        return CHANGELOG

    @function_tool(timeout=0.05)
    async def deploy(service: str) -> Dict[str, str]:
        """Deploys a service."""
        ran.append(service)
        return {"status": "deployed"}

    def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        import time

        time.sleep(0.3)  # longer than the tool's own timeout: the approval is waited for before the tool
        return rp.ApprovalAnswer("alice", True)

    run = new_run(policy)
    run_agent(run, [read_file, deploy], gated_model(), approve)
    assert ran == ["payments-api"]
    assert run.state().outcome is rp.Outcome.COMPLETED
    verify(cli, run.dir)


@pytest.mark.parametrize("arguments", ['{"path": "CHANGELOG.md"', '["CHANGELOG.md"]'])
def test_arguments_that_are_not_a_json_object_are_a_recorded_halt_and_nothing_runs_after(policy: rp.Policy, cli: Path, workdir: Path, arguments: str) -> None:
    tools = Tools()
    model = ScriptedModel(
        [
            [call("read_file", arguments, "c1")],
            [call("read_file", {"path": "CHANGELOG.md"}, "c2")],
            [assistant_message("gave up")],
        ]
    )
    run = new_run(policy)
    run_agent(run, tools.all, model)
    assert tools.ran == []
    out = shown(model)
    assert "malformed-event" in out["c1"] and "halted" in out["c2"]
    recorded = events(run)
    assert isinstance(recorded[1][0], str) and recorded[1][0].startswith('malformed invoke of tool "read_file"')
    assert recorded[1][1]["reason"] == "malformed-event" and recorded[2][1]["decision"] == "halt"
    assert run.state().outcome is rp.Outcome.FAILED
    verify(cli, run.dir)


def failing_read_file(**kw: Any) -> FunctionTool:
    @function_tool(name_override="read_file", **kw)
    def read_file(path: str) -> str:
        """Reads a file."""
        raise FileNotFoundError("no such file")

    return read_file


@pytest.mark.parametrize(
    "kw,model_sees",
    [({}, SDK_TOOL_ERROR), ({"failure_error_function": lambda ctx, e: f"read_file failed: {e}"}, "read_file failed: no such file")],
)
def test_a_tool_that_raises_is_recorded_as_an_error_result_and_the_model_gets_the_sdks_error(policy: rp.Policy, cli: Path, workdir: Path, kw: Dict[str, Any], model_sees: str) -> None:
    model = ScriptedModel([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [assistant_message("stopped")]])
    run = new_run(policy)
    assert run_agent(run, [failing_read_file(**kw)], model).final_output == "stopped"
    assert shown(model)["c1"] == model_sees
    result = [e for e, _ in events(run) if e["type"] == "result"]
    assert [(r["call_id"], r["is_error"], r["result"]) for r in result] == [("c1", True, "FileNotFoundError: no such file")]
    verify(cli, run.dir)


def test_a_tool_without_a_failure_policy_still_fails_the_run_after_its_error_is_recorded(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    model = ScriptedModel([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [assistant_message("unreachable")]])
    run = new_run(policy)
    with pytest.raises(agents.UserError, match="no such file"):
        run_agent(run, [failing_read_file(failure_error_function=None)], model)
    assert [(e["type"], e.get("is_error")) for e, _ in events(run)][-1] == ("result", True)
    # Runner.run raised before the agent answered: the run is still open, for the program to end.
    assert not run.finished
    run.end(rp.EndReason.INTERRUPTED)
    verify(cli, run.dir)


def test_a_tool_that_times_out_is_recorded_as_an_error_result(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    @function_tool(name_override="read_file", timeout=0.05)
    async def read_file(path: str) -> str:
        """Reads a file."""
        await asyncio.sleep(5)
        return CHANGELOG

    model = ScriptedModel([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [assistant_message("stopped")]])
    run = new_run(policy)
    run_agent(run, [read_file], model)
    assert "timed out" in shown(model)["c1"]
    result = [e for e, _ in events(run) if e["type"] == "result"]
    assert len(result) == 1 and result[0]["is_error"] is True and "cancelled" in result[0]["result"]
    verify(cli, run.dir)


def test_a_broken_run_blocks_every_call(policy: rp.Policy, workdir: Path) -> None:
    tools = Tools()
    model = ScriptedModel([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [assistant_message("stopped")]])
    run = new_run(policy)
    shutil.rmtree(run.dir)
    assert run_agent(run, tools.all, model).final_output == "stopped"  # the end hook leaves a broken run alone
    assert tools.ran == [] and "cannot decide" in shown(model)["c1"]
    assert isinstance(run.broken, rp.RunBroken)


def test_a_result_that_cannot_be_recorded_is_not_handed_to_the_model(policy: rp.Policy, workdir: Path) -> None:
    run = new_run(policy)

    @function_tool
    def read_file(path: str) -> str:
        """Reads a file, and loses the run's evidence while at it."""
        shutil.rmtree(run.dir)
        return CHANGELOG

    model = ScriptedModel([[call("read_file", {"path": "CHANGELOG.md"}, "c1")], [assistant_message("stopped")]])
    run_agent(run, [read_file], model)
    assert "cannot record this call's result" in shown(model)["c1"] and CHANGELOG not in shown(model)["c1"]
    assert isinstance(run.broken, rp.RunBroken)


def test_agents_handed_off_to_are_supervised_in_the_same_run(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    model = ScriptedModel(
        [
            [call("transfer_to_release_bot", {}, "h1")],
            [call("deploy", {"service": "payments-api"}, "c1")],  # out of scope, from the agent handed off to
            [call("read_file", {"path": "CHANGELOG.md"}, "c2")],
            [assistant_message("read it")],
        ]
    )
    release = Agent(name="release-bot", model=model, tools=tools.all)
    triage = Agent(name="triage", model=model, handoffs=[release])
    release.handoffs = [triage]  # a cycle: each is supervised once
    assert coverage(triage) is rp.COMPLETE
    run = new_run(policy)
    assert asyncio.run(Runner.run(supervise(triage, run), "ship it")).final_output == "read it"
    assert tools.ran == [("read_file", "CHANGELOG.md")] and "out-of-scope-tool" in shown(model)["c1"]
    assert [k[:3] for k in kinds(run)][1:] == [("invoke", "c1", "deny"), ("invoke", "c2", "allow"), ("result", "c2", "allow"), ("final_output", None, "allow"), ("end", None, "halt")]
    verify(cli, run.dir)


def test_coverage_names_what_the_adapter_cannot_see_and_a_blind_run_is_refused(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    helper = Agent(name="helper", tools=tools.all)
    assert coverage(Agent(name="a", tools=tools.all)) is rp.COMPLETE
    assert coverage(Agent(name="a", tools=[*tools.all, WebSearchTool()])) == rp.Blind([HOSTED_TOOLS])
    assert coverage(Agent(name="a", tools=[helper.as_tool(tool_name="helper", tool_description="helps")])) == rp.Blind([AGENTS_AS_TOOLS])
    assert coverage(Agent(name="a", handoffs=[handoff(helper)])) == rp.Blind([HANDOFF_OBJECTS])
    assert coverage(Agent(name="a", handoffs=[Agent(name="b", tools=[WebSearchTool()])])) == rp.Blind([HOSTED_TOOLS])
    # A blind adapter may not run destructive work: the module refuses the run up front.
    run = new_run(policy, coverage=coverage(Agent(name="a", tools=[WebSearchTool()])))
    assert run.over and run.start.decision.refusals == [rp.Refusal.COVERAGE_INCOMPLETE]
    verify(cli, run.dir)
