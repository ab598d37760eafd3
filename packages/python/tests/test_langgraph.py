"""The LangGraph adapter in whole graphs, offline: a StateGraph (the README example) and create_react_agent,
run with invoke and ainvoke, the model played by langchain_core's GenericFakeChatModel with scripted
AIMessages. The runbook is tests/runbooks/ship-hotfix.yaml; every bundle is checked with ``runbook-host verify``."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.tools import ToolException, tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, create_react_agent, tools_condition  # noqa: E402
from pydantic import Field  # noqa: E402

import runbook_policy as rp  # noqa: E402
from runbook_policy.langgraph import NATIVE_TOOLS, TOOLS_OUTSIDE_THE_NODE, RunbookToolCalls, RunbookToolNode, coverage, finish  # noqa: E402

from .conftest import RUNBOOKS, verify  # noqa: E402

SHIP = RUNBOOKS / "ship-hotfix.yaml"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "langgraph_agent.py"


class Tools:
    """The agent's real tools (LangChain tools); each records that it ran."""

    def __init__(self) -> None:
        self.ran: List[tuple] = []

    def all(self) -> list:
        @tool
        def read_file(path: str) -> str:
            """Reads a file of the repository."""
            self.ran.append(("read_file", path))
            return "## 1.4.1\n- hotfix: stop the payments retry storm\n"

        @tool
        def deploy(service: str) -> Dict[str, str]:
            """Deploys a service."""
            self.ran.append(("deploy", service))
            return {"status": "deployed", "service": service}

        @tool
        def shell(command: str) -> str:
            """Runs a shell command."""
            self.ran.append(("shell", command))
            return "ran"

        @tool
        def opaque(value: str) -> str:
            """Takes a value."""
            self.ran.append(("opaque", value))
            return "ran"

        return [read_file, deploy, shell, opaque]


class Scripted(GenericFakeChatModel):
    """The framework's fake chat model, one scripted AIMessage per turn; it keeps what it was shown. Tools are
    "bound" as a real chat model binds them, but the script decides the calls."""

    seen: List[List[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> "Scripted":
        return self

    def _generate(self, messages: List[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)

    def returns(self, call_id: str) -> ToolMessage:
        """The tool message the model was shown for a call."""
        return next(m for turn in self.seen for m in turn if isinstance(m, ToolMessage) and m.tool_call_id == call_id)


def script(*turns: Any) -> Scripted:
    return Scripted(messages=iter(turns))


def calls(*cs: tuple) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in cs])


def new_run(policy: rp.Policy, **over: Any) -> rp.Run:
    claim = dict(adapter="langgraph", agent="release-bot", profile="R2", risk_ceiling="destructive", coverage=coverage(every_tool_in_the_node=True))
    claim.update(over)
    return rp.Run.create(policy, SHIP, **claim)


def graph(model: Scripted, node: ToolNode) -> Any:
    """The README example's graph, with the node given."""
    g = StateGraph(MessagesState)
    llm = model.bind_tools(list(node.tools_by_name.values()))
    g.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
    g.add_node("tools", node)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile()


def run_graph(run: rp.Run, tools: Tools, model: Scripted, approve: Optional[Callable] = None, mode: str = "sync", **kw: Any) -> str:
    g = graph(model, RunbookToolNode(tools.all(), run=run, approve=approve, **kw))
    prompt = {"messages": [("user", "ship the hotfix")]}
    state = g.invoke(prompt) if mode == "sync" else asyncio.run(g.ainvoke(prompt))
    return state["messages"][-1].content


def events(run: rp.Run) -> List[tuple]:
    return [(json.loads(e) if e.startswith("{") else e, json.loads(d)) for _, e, d in rp._bundle.read_events((run.dir / "events.ndjson").read_bytes())]


def load_example() -> Any:
    # By path, under another name: a module named `langgraph` on sys.path would hide the framework.
    spec = importlib.util.spec_from_file_location("readme_langgraph_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_example_reads_is_blocked_out_of_scope_waits_for_approval_and_ships(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    assert len(EXAMPLE.read_text().splitlines()) <= 25
    tools = Tools()
    model = script(
        calls(("deploy", {"service": "payments-api"}, "c1")),  # out of scope: `deploy` belongs to `ship`
        calls(("shell", {"command": "curl -s https://status.example.com"}, "c2")),  # undeclared
        calls(("read_file", {"path": "CHANGELOG.md"}, "c3")),  # in scope: the assert passes, `ship` is next
        calls(("deploy", {"service": "payments-api"}, "c4")),  # gated: held until approved
        AIMessage(content="Shipped the payments-api hotfix."),
    )
    asked: List[rp.ApprovalRequest] = []

    def approve(request: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        asked.append(request)
        assert ("deploy", "payments-api") not in tools.ran  # the call is held here: nothing has run yet
        return rp.ApprovalAnswer(approver="alice", granted=True)

    run, answer = load_example().ship_hotfix(model, tools.all(), approve, runbook=SHIP)
    assert answer == "Shipped the payments-api hotfix."
    assert run.finished and run.state().outcome is rp.Outcome.COMPLETED

    # Only the calls the module allowed ran.
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    # The model was shown LangChain's own tool error, naming the deviation and carrying the module's sentence.
    blocked = model.returns("c1")
    assert blocked.status == "error" and blocked.name == "deploy"
    assert "out-of-scope-tool" in blocked.content and "not in the current step" in blocked.content
    assert model.returns("c2").status == "error" and "undeclared-tool" in model.returns("c2").content
    assert model.returns("c3").status == "success" and "hotfix" in model.returns("c3").content
    assert model.returns("c4").status == "success" and json.loads(model.returns("c4").content)["status"] == "deployed"
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
    # The tool's dict, which LangChain showed the model as JSON text, is recorded as the object the runbook asserts on.
    assert recorded[4][0]["result"].startswith("## 1.4.1") and recorded[4][0]["is_error"] is False
    assert recorded[8][0]["result"] == {"status": "deployed", "service": "payments-api"} and recorded[8][1]["step"] == "shipped"
    assert json.loads((run.dir / "run.json").read_text())["adapter"]["name"] == "langgraph"
    report = json.loads(run.report())
    assert report["terminal"] == "shipped" and [d["class"] for d in report["deviations"]] == ["out-of-scope-tool", "undeclared-tool"]
    out = verify(cli, run.dir)
    assert out["outcome"] == "completed" and out["events"] == 11


def test_create_react_agent_with_ainvoke_decides_parallel_calls_and_ships(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    model = script(
        # One turn, two calls: create_react_agent sends each to the node as a task of its own.
        calls(("shell", {"command": "rm -rf /"}, "c1"), ("read_file", {"path": "CHANGELOG.md"}, "c2")),
        calls(("deploy", {"service": "payments-api"}, "c3")),
        AIMessage(content="done"),
    )

    async def approve(request: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        return rp.ApprovalAnswer("alice", True)

    run = new_run(policy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain's create_agent
        agent = create_react_agent(model, RunbookToolNode(tools.all(), run=run, approve=approve))
    state = asyncio.run(agent.ainvoke({"messages": [("user", "ship the hotfix")]}))
    assert state["messages"][-1].content == "done"
    assert finish(run) is rp.Outcome.COMPLETED
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    assert model.returns("c1").status == "error" and "undeclared-tool" in model.returns("c1").content
    decided = {(e["call_id"], d["decision"]) for e, d in events(run) if isinstance(e, dict) and e["type"] == "invoke"}
    assert decided == {("c1", "deny"), ("c2", "allow"), ("c3", "needs-approval"), ("c3", "allow")}
    verify(cli, run.dir)


def gated_script() -> Scripted:
    return script(
        calls(("read_file", {"path": "CHANGELOG.md"}, "c1")),
        calls(("deploy", {"service": "payments-api"}, "c2")),
        AIMessage(content="done"),
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    "name,approve,problem",
    [
        ("no callback", None, "no approval callback"),
        ("a callback that raises", lambda r: (_ for _ in ()).throw(RuntimeError("pager down")), "failed (RuntimeError)"),
        ("a callback that answers nonsense", lambda r: True, "no ApprovalAnswer"),
        ("a human who says no", lambda r: rp.ApprovalAnswer("alice", False), "a human refused"),
        ("the agent approving itself", lambda r: rp.ApprovalAnswer("release-bot", True), "self-approval"),
        ("an async callback that never answers", "hang", "no approval came within"),
    ],
)
def test_a_gated_call_without_a_valid_human_approval_never_runs(
    policy: rp.Policy, cli: Path, workdir: Path, name: str, approve: Any, problem: str, mode: str
) -> None:
    if approve == "hang":
        async def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
            await asyncio.sleep(30)
            raise AssertionError("unreachable")
    tools, model = Tools(), gated_script()
    run = new_run(policy)
    assert run_graph(run, tools, model, approve, mode, approval_timeout=0.2) == "done"
    assert tools.ran == [("read_file", "CHANGELOG.md")], name
    blocked = model.returns("c2")
    assert blocked.status == "error" and "needs-approval" in blocked.content and problem in blocked.content, blocked.content
    assert finish(run) is rp.Outcome.INCOMPLETE
    assert not any(e["type"] == "invoke" and d["decision"] == "allow" and e["tool"] == "deploy" for e, d in events(run))
    verify(cli, run.dir)


def test_a_sync_callback_that_never_answers_does_not_hold_a_sync_graph_past_the_timeout(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        time.sleep(1.5)
        return rp.ApprovalAnswer("alice", True)

    tools, model = Tools(), gated_script()
    run = new_run(policy)
    began = time.monotonic()
    assert run_graph(run, tools, model, approve, "sync", approval_timeout=0.2) == "done"
    assert time.monotonic() - began < 1.2
    assert tools.ran == [("read_file", "CHANGELOG.md")] and "no approval came within" in model.returns("c2").content
    assert finish(run) is rp.Outcome.INCOMPLETE
    verify(cli, run.dir)


def test_the_sync_interceptor_in_an_async_graph_decides_off_the_loop_and_may_grant(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    # A ToolNode of the program's own with only the sync interceptor: under ainvoke LangGraph calls it on the loop.
    tools, model = Tools(), gated_script()
    run = new_run(policy)
    interceptor = RunbookToolCalls(run, approve=lambda r: rp.ApprovalAnswer("alice", True))
    g = graph(model, ToolNode(tools.all(), wrap_tool_call=interceptor.wrap_tool_call))
    state = asyncio.run(g.ainvoke({"messages": [("user", "ship the hotfix")]}))
    assert state["messages"][-1].content == "done"
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    assert finish(run) is rp.Outcome.COMPLETED
    verify(cli, run.dir)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_arguments_that_are_not_json_are_a_recorded_halt_and_nothing_runs_after(policy: rp.Policy, cli: Path, workdir: Path, mode: str) -> None:
    tools = Tools()
    model = script(
        calls(("opaque", {"value": {1, 2}}, "c1")),  # a program-built AIMessage may carry any Python value
        calls(("read_file", {"path": "CHANGELOG.md"}, "c2")),
        AIMessage(content="gave up"),
    )
    run = new_run(policy)
    assert run_graph(run, tools, model, mode=mode) == "gave up"
    assert tools.ran == []
    assert model.returns("c1").status == "error" and "malformed-event" in model.returns("c1").content
    assert model.returns("c2").status == "error" and "halted" in model.returns("c2").content
    recorded = events(run)
    assert isinstance(recorded[1][0], str) and recorded[1][0].startswith('malformed invoke of tool "opaque"')
    assert recorded[1][1]["reason"] == "malformed-event" and recorded[2][1]["decision"] == "halt"
    assert finish(run) is rp.Outcome.FAILED
    verify(cli, run.dir)


def failing_tools(ran: List[str], error: Exception) -> list:
    @tool
    def read_file(path: str) -> str:
        """Reads a file of the repository."""
        ran.append(path)
        raise error

    return [read_file]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tool_error_the_node_handles_is_recorded_as_an_error_result_and_reaches_the_model(policy: rp.Policy, cli: Path, workdir: Path, mode: str) -> None:
    ran: List[str] = []
    model = script(calls(("read_file", {"path": "CHANGELOG.md"}, "c1")), AIMessage(content="stopped"))
    run = new_run(policy)
    g = graph(model, RunbookToolNode(failing_tools(ran, ValueError("no such file")), run=run, handle_tool_errors=True))
    prompt = {"messages": [("user", "x")]}
    state = g.invoke(prompt) if mode == "sync" else asyncio.run(g.ainvoke(prompt))
    assert state["messages"][-1].content == "stopped" and ran == ["CHANGELOG.md"]
    shown = model.returns("c1")
    assert shown.status == "error" and "no such file" in shown.content
    result = [e for e, _ in events(run) if e["type"] == "result"]
    assert [(r["call_id"], r["is_error"], r["result"]) for r in result] == [("c1", True, shown.content)]
    # The step's assert (`/is_error` equals false) fails on it: the runbook's outcome.
    assert finish(run) is rp.Outcome.FAILED
    verify(cli, run.dir)


def test_a_tool_exception_of_langchain_is_an_error_result(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    ran: List[str] = []
    (read_file,) = failing_tools(ran, ToolException("permission denied"))
    read_file.handle_tool_error = True  # LangChain's own handling: the tool answers an error message
    model = script(calls(("read_file", {"path": "CHANGELOG.md"}, "c1")), AIMessage(content="stopped"))
    run = new_run(policy)
    graph(model, RunbookToolNode([read_file], run=run)).invoke({"messages": [("user", "x")]})
    assert model.returns("c1").status == "error" and model.returns("c1").content == "permission denied"
    result = [e for e, _ in events(run) if e["type"] == "result"]
    assert [(r["is_error"], r["result"]) for r in result] == [(True, "permission denied")]
    finish(run)
    verify(cli, run.dir)


def test_a_tool_error_the_node_raises_is_recorded_before_the_graph_fails(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    ran: List[str] = []
    model = script(calls(("read_file", {"path": "CHANGELOG.md"}, "c1")), AIMessage(content="unreachable"))
    run = new_run(policy)
    g = graph(model, RunbookToolNode(failing_tools(ran, ValueError("disk on fire")), run=run))  # ToolNode's default: raise
    with pytest.raises(ValueError, match="disk on fire"):
        g.invoke({"messages": [("user", "x")]})
    result = [e for e, _ in events(run) if e["type"] == "result"]
    assert [(r["call_id"], r["is_error"], r["result"]) for r in result] == [("c1", True, "ValueError: disk on fire")]
    assert finish(run, rp.EndReason.INTERRUPTED) is rp.Outcome.FAILED
    assert not any(e["type"] == "final_output" for e, _ in events(run))
    verify(cli, run.dir)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_broken_run_blocks_every_call(policy: rp.Policy, workdir: Path, mode: str) -> None:
    import shutil

    tools = Tools()
    model = script(calls(("read_file", {"path": "CHANGELOG.md"}, "c1")), AIMessage(content="stopped"))
    run = new_run(policy)
    shutil.rmtree(run.dir)
    assert run_graph(run, tools, model, mode=mode) == "stopped"
    assert tools.ran == [] and model.returns("c1").status == "error" and "cannot decide" in model.returns("c1").content
    assert isinstance(run.broken, rp.RunBroken)


def test_the_node_keeps_its_interceptor_to_itself() -> None:
    with pytest.raises(TypeError, match="RunbookToolCalls"):
        RunbookToolNode([], run=None, wrap_tool_call=lambda r, e: e(r))  # type: ignore[arg-type]


def test_coverage_is_complete_only_when_every_tool_is_in_the_node_and_no_native_tools(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    assert coverage(every_tool_in_the_node=True) is rp.COMPLETE
    assert coverage(every_tool_in_the_node=False) == rp.Blind([TOOLS_OUTSIDE_THE_NODE])
    assert coverage(every_tool_in_the_node=True, native_tools=True) == rp.Blind([NATIVE_TOOLS])
    # A blind adapter may not run destructive work: the module refuses the run up front.
    run = new_run(policy, coverage=coverage(every_tool_in_the_node=False))
    assert run.over and run.start.decision.refusals == [rp.Refusal.COVERAGE_INCOMPLETE]
    verify(cli, run.dir)
