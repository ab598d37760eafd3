"""The Google ADK adapter in a real Runner (InMemoryRunner), offline: the model is a scripted ``BaseLlm``
that answers with function calls, and no socket may be opened."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import socket
from pathlib import Path
from typing import Any, AsyncGenerator, Callable, Dict, List, Optional

import pytest

pytest.importorskip("google.adk", reason="the google-adk extra is not installed")

from google.adk.agents import Agent  # noqa: E402
from google.adk.apps import App  # noqa: E402
from google.adk.models import BaseLlm, LlmRequest, LlmResponse  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.adk.tools.agent_tool import AgentTool  # noqa: E402
from google.adk.workflow import START, Workflow  # noqa: E402
from google.genai import types  # noqa: E402

import runbook_policy as rp  # noqa: E402
from runbook_policy.google_adk import CODE_EXECUTOR, ISOLATED_AGENT_TOOLS, NATIVE_TOOLS, RunbookPlugin, coverage  # noqa: E402

from .conftest import RUNBOOKS, verify  # noqa: E402

SHIP = RUNBOOKS / "ship-hotfix.yaml"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "google_adk.py"

# A runbook whose one step is reached through a helper agent (an AgentTool): tests the nested Runner.
DELEGATE = """\
runbook_id: delegate-the-check
version: 1.0.0
title: Have a helper agent check the changelog
mode: required
execution: human-with-agent
capabilities:
  - name: ask-helper
    tool: helper
    risk: read-only
  - name: read-changelog
    tool: read_file
    risk: read-only
    when: {path: /path, op: matches, value: '^CHANGELOG\\.md$'}
steps:
  - id: inspect
    tools: [ask-helper, read-changelog]
    observe: read-changelog
    body: Ask the helper to read the changelog.
    assert:
      - {path: /is_error, op: equals, value: false}
      - {path: /result, op: contains, value: hotfix}
    next: checked
terminals: [checked]
"""


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No API key, and any attempt to open a connection fails the test (the CLI runs in a subprocess)."""
    for key in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(key, raising=False)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"the test tried the network: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def call(name: str, args: Any, call_id: Optional[str] = None) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args, id=call_id))


def text(t: str) -> types.Part:
    return types.Part(text=t)


class Scripted(BaseLlm):
    """A scripted model: turn N answers the N-th request of a conversation; it keeps the last request."""

    turns: List[List[Any]]
    last: Optional[LlmRequest] = None

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self.last = llm_request
        turn = sum(1 for c in llm_request.contents if c.role == "model")
        yield LlmResponse(content=types.Content(role="model", parts=self.turns[turn]))

    def responses(self) -> List[types.FunctionResponse]:
        """Every function response the model was shown, in order."""
        assert self.last is not None
        return [p.function_response for c in self.last.contents for p in c.parts or [] if p.function_response]

    def response(self, name: str, index: int = 0) -> Dict[str, Any]:
        return [r.response for r in self.responses() if r.name == name][index]


def model(*turns: List[Any]) -> Scripted:
    return Scripted(model="scripted", turns=list(turns))


class Tools:
    """The agent's real tools; each records that it ran."""

    def __init__(self) -> None:
        self.ran: List[tuple] = []

    def all(self) -> List[Callable[..., Any]]:
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

        return [read_file, deploy, shell]


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("readme_google_adk", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def new_run(policy: rp.Policy, document: Any = SHIP, **over: Any) -> rp.Run:
    claim = dict(adapter="google-adk", agent="release-bot", profile="R2", risk_ceiling="destructive", coverage=coverage())
    claim.update(over)
    return rp.Run.create(policy, document, **claim)


async def drive(run: rp.Run, agent: Any, **plugin: Any) -> List[str]:
    """Runs ``agent`` for one message in an InMemoryRunner with the plugin; the final answers' text."""
    answers: List[str] = []
    app = App(name="release", root_agent=agent, plugins=[RunbookPlugin(run, **plugin)])
    async with InMemoryRunner(app=app) as runner:
        session = await runner.session_service.create_session(app_name="release", user_id="ops")
        message = types.Content(role="user", parts=[text("ship the hotfix")])
        async for event in runner.run_async(user_id="ops", session_id=session.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts and event.content.parts[0].text:
                answers.append(event.content.parts[0].text)
    return answers


def events(run: rp.Run) -> List[tuple]:
    return [(json.loads(e) if e.startswith("{") else e, json.loads(d)) for _, e, d in rp._bundle.read_events((run.dir / "events.ndjson").read_bytes())]


def kinds(run: rp.Run) -> List[tuple]:
    return [(e["type"], e.get("tool"), d["decision"], d["deviation"] or d["reason"]) for e, d in events(run)]


def test_the_readme_example_blocks_out_of_scope_waits_for_approval_and_ships(policy: rp.Policy, cli: Path, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(SHIP, workdir / "runbook.yaml")
    tools = Tools()
    llm = model(
        [call("deploy", {"service": "payments-api"}, "c1")],  # out of scope: `deploy` belongs to `ship`
        [call("shell", {"command": "curl -s https://status.example.com"})],  # undeclared; no id: ADK gives one
        [call("read_file", {"path": "CHANGELOG.md"}, "c3")],  # in scope: the assert passes, `ship` is next
        [call("deploy", {"service": "payments-api"}, "c4")],  # gated: held until approved
        [text("Shipped the payments-api hotfix.")],
    )
    asked: List[rp.ApprovalRequest] = []

    async def approve(request: rp.ApprovalRequest) -> rp.ApprovalAnswer:
        asked.append(request)
        assert ("deploy", "payments-api") not in tools.ran  # held: nothing has run yet
        return rp.ApprovalAnswer(approver="alice", granted=True)

    run = asyncio.run(load_example().ship_hotfix(llm, tools.all(), approve))
    assert capsys.readouterr().out.strip().splitlines()[-1] == "Shipped the payments-api hotfix."

    # Only the calls the module allowed ran.
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    # The model was shown ADK's error shape with the deviation and the module's sentence.
    denied = llm.response("deploy", 0)
    assert set(denied) == {"error"} and denied["error"].startswith("blocked by the runbook:")
    assert "out-of-scope-tool" in denied["error"] and "not in the current step" in denied["error"]
    assert "undeclared-tool" in llm.response("shell")["error"]
    assert llm.response("read_file") == {"result": "## 1.4.1\n- hotfix: stop the payments retry storm\n"}
    assert llm.response("deploy", 1) == {"status": "deployed", "service": "payments-api"}
    sha = policy.call_sha256("deploy", {"service": "payments-api"})
    assert [(r.step, r.tool, r.arguments, r.call_sha256) for r in asked] == [("ship", "deploy", {"service": "payments-api"}, sha)]

    recorded = events(run)
    assert kinds(run) == [
        ("start", None, "allow", None),
        ("invoke", "deploy", "deny", "out-of-scope-tool"),
        ("invoke", "shell", "deny", "undeclared-tool"),
        ("invoke", "read_file", "allow", None),
        ("result", "read_file", "allow", None),
        ("invoke", "deploy", "needs-approval", "awaiting-approval"),
        ("approval", None, "allow", None),
        ("invoke", "deploy", "allow", None),
        ("result", "deploy", "allow", None),
        ("final_output", None, "allow", None),
        ("end", None, "halt", "run-ended"),
    ]
    # The framework's function-call ids pair each result with its call (ADK's own `adk-...` id for one without).
    ids = [e.get("call_id") for e, _ in recorded]
    assert ids[1] == "c1" and ids[2].startswith("adk-") and ids[3:5] == ["c3", "c3"] and ids[7:9] == ["c4", "c4"]
    assert recorded[8][0]["result"] == {"status": "deployed", "service": "payments-api"} and recorded[8][1]["step"] == "shipped"
    # The run ended at the terminal when the agent answered, before the Runner closed.
    assert run.finished and run.state().outcome is rp.Outcome.COMPLETED
    adapter = json.loads((run.dir / "run.json").read_text())["adapter"]
    assert (adapter["name"], adapter["coverage"]) == ("google-adk", "complete") and "Google ADK" in adapter["sees"]
    out = verify(cli, run.dir)
    assert out["outcome"] == "completed" and out["events"] == 11


@pytest.mark.parametrize(
    "name,approve,problem",
    [
        ("no callback", None, "no approval callback"),
        ("a human who says no", lambda r: rp.ApprovalAnswer("alice", False), "a human refused"),
        ("a callback that raises", "raise", "failed (RuntimeError)"),
        ("a callback that never answers", "hang", "no approval came within"),
    ],
)
def test_a_gated_call_without_a_human_approval_never_runs(policy: rp.Policy, cli: Path, workdir: Path, name: str, approve: Any, problem: str) -> None:
    if approve == "raise":
        async def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
            raise RuntimeError("pager down")
    elif approve == "hang":
        async def approve(r: rp.ApprovalRequest) -> rp.ApprovalAnswer:
            await asyncio.sleep(30)
            raise AssertionError("unreachable")
    tools = Tools()
    llm = model([call("read_file", {"path": "CHANGELOG.md"}, "c1")], [call("deploy", {"service": "payments-api"}, "c2")], [text("done")])
    run = new_run(policy)
    assert asyncio.run(drive(run, Agent(name="bot", model=llm, tools=tools.all()), approve=approve, approval_timeout=0.2)) == ["done"]
    assert tools.ran == [("read_file", "CHANGELOG.md")], name
    blocked = llm.response("deploy")["error"]
    assert "needs-approval" in blocked and problem in blocked, blocked
    # Away from a terminal the run stayed open after the answer; closing the Runner ended it.
    assert run.finished and run.state().outcome is rp.Outcome.INCOMPLETE
    assert [k for k in kinds(run) if k[0] in ("final_output", "end")] == [("final_output", None, "allow", None), ("end", None, "halt", "run-ended")]
    assert not any(e["type"] == "invoke" and e["tool"] == "deploy" and d["decision"] == "allow" for e, d in events(run))
    verify(cli, run.dir)


def test_a_sync_approval_callback_may_grant(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    llm = model([call("read_file", {"path": "CHANGELOG.md"}, "c1")], [call("deploy", {"service": "payments-api"}, "c2")], [text("done")])
    run = new_run(policy)
    asyncio.run(drive(run, Agent(name="bot", model=llm, tools=tools.all()), approve=lambda r: rp.ApprovalAnswer("alice", True)))
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    assert run.state().outcome is rp.Outcome.COMPLETED
    verify(cli, run.dir)


def test_arguments_that_are_not_json_are_a_recorded_halt_and_nothing_runs_after(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    tools = Tools()
    llm = model([call("read_file", {"path": object()}, "c1")], [call("read_file", {"path": "CHANGELOG.md"}, "c2")], [text("gave up")])
    run = new_run(policy)
    asyncio.run(drive(run, Agent(name="bot", model=llm, tools=tools.all())))
    assert tools.ran == []
    assert "malformed-event" in llm.response("read_file", 0)["error"] and "halted" in llm.response("read_file", 1)["error"]
    recorded = events(run)
    assert isinstance(recorded[1][0], str) and recorded[1][0].startswith('malformed invoke of tool "read_file"')
    assert recorded[1][1]["reason"] == "malformed-event" and recorded[2][1]["decision"] == "halt"
    assert run.finished and run.state().outcome is rp.Outcome.FAILED
    verify(cli, run.dir)


def test_a_tool_that_raises_is_an_error_result_and_adk_raises_it(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    def read_file(path: str) -> str:
        """Reads a file of the repository."""
        raise FileNotFoundError(path)

    llm = model([call("read_file", {"path": "CHANGELOG.md"}, "c1")], [text("unreachable")])
    run = new_run(policy)
    with pytest.raises(FileNotFoundError):
        asyncio.run(drive(run, Agent(name="bot", model=llm, tools=[read_file])))
    result = [(e, d) for e, d in events(run) if e["type"] == "result"]
    assert [(e["call_id"], e["is_error"], e["result"]) for e, _ in result] == [("c1", True, "FileNotFoundError: CHANGELOG.md")]
    # The step's assert fails on an error result, so the module ended the run (and no final output came).
    assert run.finished and run.state().outcome is rp.Outcome.FAILED
    assert "final_output" not in [k[0] for k in kinds(run)]
    verify(cli, run.dir)


def test_adks_own_error_shape_from_a_tool_is_an_error_result(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    def read_file(path: str) -> Dict[str, str]:
        """Reads a file of the repository."""
        return {"error": f"{path} is not readable"}

    llm = model([call("read_file", {"path": "CHANGELOG.md"}, "c1")], [text("stopped")])
    run = new_run(policy)
    asyncio.run(drive(run, Agent(name="bot", model=llm, tools=[read_file])))
    result = [e for e, _ in events(run) if e["type"] == "result"]
    assert [(e["is_error"], e["result"]) for e in result] == [(True, {"error": "CHANGELOG.md is not readable"})]
    assert llm.response("read_file") == {"error": "CHANGELOG.md is not readable"}
    verify(cli, run.dir)


def test_a_broken_run_blocks_every_call(policy: rp.Policy, workdir: Path) -> None:
    tools = Tools()
    llm = model([call("read_file", {"path": "CHANGELOG.md"}, "c1")], [text("stopped")])
    run = new_run(policy)
    shutil.rmtree(run.dir)
    asyncio.run(drive(run, Agent(name="bot", model=llm, tools=tools.all())))
    assert tools.ran == [] and "cannot decide" in llm.response("read_file")["error"]
    assert isinstance(run.broken, rp.RunBroken)


def test_every_agent_of_the_runner_is_supervised_by_the_one_plugin(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    """The agents of a Workflow, one after the other: each one's calls are decided by the same run."""
    tools = Tools()
    reader = Agent(name="reader", model=model([call("read_file", {"path": "CHANGELOG.md"}, "r1")], [text("it names the hotfix")]), tools=tools.all())
    shipper_model = model([call("shell", {"command": "rm -rf /"}, "s1")], [call("deploy", {"service": "payments-api"}, "s2")], [text("shipped")])
    shipper = Agent(name="shipper", model=shipper_model, tools=tools.all())
    run = new_run(policy)
    asyncio.run(drive(run, Workflow(name="release", edges=[(START, reader, shipper)]), approve=lambda r: rp.ApprovalAnswer("alice", True)))
    assert tools.ran == [("read_file", "CHANGELOG.md"), ("deploy", "payments-api")]
    assert "undeclared-tool" in shipper_model.response("shell")["error"]
    assert [k for k in kinds(run) if k[0] == "invoke"] == [
        ("invoke", "read_file", "allow", None),
        ("invoke", "shell", "deny", "undeclared-tool"),
        ("invoke", "deploy", "needs-approval", "awaiting-approval"),
        ("invoke", "deploy", "allow", None),
    ]
    assert run.state().outcome is rp.Outcome.COMPLETED
    verify(cli, run.dir)


def test_an_agent_tool_runs_its_agent_under_the_same_plugin_and_its_answer_is_not_the_final_output(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    (workdir / "delegate.yaml").write_text(DELEGATE)
    tools = Tools()
    helper_model = model([call("deploy", {"service": "payments-api"}, "h1")], [call("read_file", {"path": "CHANGELOG.md"}, "h2")], [text("it names the hotfix")])
    helper = Agent(name="helper", model=helper_model, description="Reads files.", tools=tools.all())
    root_model = model([call("helper", {"request": "read the changelog"}, "c1")], [text("checked")])
    run = new_run(policy, workdir / "delegate.yaml", risk_ceiling="read-only")
    asyncio.run(drive(run, Agent(name="bot", model=root_model, tools=[AgentTool(helper)])))
    assert tools.ran == [("read_file", "CHANGELOG.md")]
    assert "undeclared-tool" in helper_model.response("deploy")["error"]
    assert kinds(run) == [
        ("start", None, "allow", None),
        ("invoke", "helper", "allow", None),
        ("invoke", "deploy", "deny", "undeclared-tool"),
        ("invoke", "read_file", "allow", None),
        ("result", "read_file", "allow", None),
        ("result", "helper", "allow", None),
        ("final_output", None, "allow", None),  # once: the root agent's answer, not the helper's
        ("end", None, "halt", "run-ended"),
    ]
    assert run.state().outcome is rp.Outcome.COMPLETED
    verify(cli, run.dir)


def test_coverage_is_complete_only_without_native_tools_code_executors_or_isolated_agent_tools(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    assert coverage() is rp.COMPLETE
    assert coverage(native_tools=True) == rp.Blind([NATIVE_TOOLS])
    assert coverage(code_executor=True, isolated_agent_tools=True) == rp.Blind([CODE_EXECUTOR, ISOLATED_AGENT_TOOLS])
    # A blind adapter may not run destructive work: the module refuses the run up front.
    run = new_run(policy, coverage=coverage(native_tools=True))
    assert run.over and run.start.decision.refusals == [rp.Refusal.COVERAGE_INCOMPLETE]
    verify(cli, run.dir)
