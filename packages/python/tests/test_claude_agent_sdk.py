"""The Claude Agent SDK adapter (runbook_policy.claude_agent_sdk).

End to end: the real SDK loop (``query()``, claude-agent-sdk 0.2.189 and the Claude Code CLI its wheel
bundles), offline, its model played by the scripted Messages API on loopback
(host/tests/claude/messages_api.py, run from there), the hooks installed by ``runbook_hooks``. The runbook
is tests/claude/greet-and-write.yaml. Then the callbacks one by one, fed hook inputs directly (malformed
input, approvals refused or late, a finished run, Stop away from a terminal). Every bundle a test writes is
checked with ``$RUNBOOK_HOST verify``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runbook_policy as rp
from runbook_policy.claude_agent_sdk import (
    ADAPTER,
    COVERAGE,
    ApprovalAnswer,
    ApprovalRequest,
    RunbookHooks,
    create_run,
    end_run,
    runbook_hooks,
)

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, ResultMessage, query

from .conftest import REPO, cli_path
from .conftest import verify as verify_with

HERE = Path(__file__).resolve().parent
RUNBOOK = HERE / "claude" / "greet-and-write.yaml"
MESSAGES_API = REPO / "host" / "tests" / "claude" / "messages_api.py"
GREETING = {"command": "touch greeting.txt"}

# The model's turns: a command no capability declares (it would create `pwned`), the greeting, the gated
# command (it creates greeting.txt once approved), then the answer.
SCRIPT = [
    {"tool_use": [{"name": "Bash", "input": {"command": "touch pwned"}}]},
    {"tool_use": [{"name": "Bash", "input": {"command": "echo hello"}}]},
    {"tool_use": [{"name": "Bash", "input": GREETING}]},
    {"text": "Said hello and wrote greeting.txt."},
]


def verify(run_dir) -> dict:
    """``$RUNBOOK_HOST verify DIR``: exit 0, ok, replayed (conftest's check)."""
    return verify_with(cli_path(), Path(run_dir))


def events(run) -> list:
    return [json.loads(l) for l in (Path(run.dir) / "events.ndjson").read_text().splitlines()]


def report(run) -> dict:
    return json.loads((Path(run.dir) / "report.json").read_text())


def invokes(run, command) -> list:
    return [e for e in events(run) if e["event"].get("type") == "invoke" and e["event"]["arguments"].get("command") == command]


@contextlib.contextmanager
def scripted_api(scratch: Path, turns: list):
    """The scripted Messages API playing ``turns``: yields (port, request log path); killed on exit."""
    script, log = scratch / "script.json", scratch / "requests.ndjson"
    script.write_text(json.dumps(turns))
    proc = subprocess.Popen([sys.executable, str(MESSAGES_API), str(script), str(log)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield port, log
    finally:
        proc.kill()
        proc.wait()


def tool_results(log: Path) -> list:
    """The tool results the CLI sent back to the model, in order: {id, is_error, content}."""
    out = []
    for line in log.read_text().splitlines():
        out += json.loads(line).get("tool_results") or []
    return out


class Session:
    """One ``query()`` in a scratch project, against the scripted API; what it produced."""

    def __init__(self, tmp_path: Path, hooks: dict, turns=SCRIPT):
        self.project = tmp_path / "project"
        self.scratch = tmp_path / "scratch"
        for d in (self.project, self.scratch / "home"):
            d.mkdir(parents=True, exist_ok=True)
        self.hooks, self.turns = hooks, turns
        self.messages: list = []
        self.results: list = []
        self.elapsed = 0.0

    def options(self, port: int) -> ClaudeAgentOptions:
        # As host/tests/it/common/claude_cli.rs drives the CLI: a scratch HOME, a dummy key, no nonessential
        # traffic, no settings files; the CLI lets Bash run, so what is blocked is blocked by a hook.
        return ClaudeAgentOptions(
            hooks=self.hooks,
            cwd=str(self.project),
            tools=["Bash"],
            allowed_tools=["Bash"],
            max_turns=10,
            setting_sources=[],
            strict_mcp_config=True,
            env={
                "HOME": str(self.scratch / "home"),
                "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
                "ANTHROPIC_API_KEY": "sk-ant-scripted-test",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )

    def run(self, prompt="Say hello, then write greeting.txt.") -> "Session":
        with scripted_api(self.scratch, self.turns) as (port, log):
            t = time.monotonic()

            async def go():
                async for m in query(prompt=prompt, options=self.options(port)):
                    self.messages.append(m)

            asyncio.run(asyncio.wait_for(go(), 120))
            self.elapsed = time.monotonic() - t
            self.results = tool_results(log)
        return self

    @property
    def result(self) -> ResultMessage:
        r = [m for m in self.messages if isinstance(m, ResultMessage)]
        assert r, self.messages
        return r[-1]


# -- the real SDK loop ----------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    """The SDK passes this process's environment on to the CLI (under ``options.env``): no Anthropic or
    Claude Code setting of the machine reaches it."""
    for k in list(os.environ):
        if k.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE")):
            monkeypatch.delenv(k)


def test_a_real_sdk_loop_blocks_out_of_scope_holds_the_gated_call_for_approval_and_completes(policy, tmp_path, clean_env):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs", agent="claude-agent-sdk:test")
    asked: list = []
    session = Session(tmp_path, {})

    async def approve(request: ApprovalRequest) -> ApprovalAnswer:
        # Held: the gated command has not run while the approval is pending.
        assert not (session.project / "greeting.txt").exists()
        asked.append(request)
        await asyncio.sleep(0.2)  # a person takes a moment
        return ApprovalAnswer(approver="alice", granted=True)

    session.hooks = runbook_hooks(run, approve=approve)
    session.run()
    assert session.result.subtype == "success", session.messages

    # Out of scope: denied before the shell ran it, and the model read the module's explanation.
    assert not (session.project / "pwned").exists()
    assert [r["is_error"] for r in session.results] == [True, False, False], session.results
    assert "undeclared-tool" in session.results[0]["content"], session.results[0]
    # The gated call was held for the approval callback, asked once, bound to that call's hash; then it ran.
    assert len(asked) == 1
    sha = policy.call_sha256("Bash", GREETING)
    assert (asked[0].tool, asked[0].arguments, asked[0].step, asked[0].call_sha256) == ("Bash", GREETING, "write", sha)
    assert (session.project / "greeting.txt").is_file()

    # The bundle: both decisions on `touch pwned`'s single invoke, the approval bound to the call, the
    # gated call decided twice (held, then allowed), the end at the terminal, written by the Stop hook.
    assert run.over
    (denied,) = invokes(run, "touch pwned")
    assert (denied["decision"]["decision"], denied["decision"]["deviation"]) == ("deny", "undeclared-tool")
    assert denied["event"]["call_id"] == "toolu_script_00_00"
    held, allowed = invokes(run, "touch greeting.txt")
    assert (held["decision"]["decision"], allowed["decision"]["decision"]) == ("needs-approval", "allow")
    approvals = [e for e in events(run) if e["event"]["type"] == "approval"]
    assert [(a["event"]["approver"], a["event"]["call_sha256"], a["event"]["granted"], a["decision"]["decision"]) for a in approvals] == [
        ("alice", sha, True, "allow")
    ]
    kinds = [e["event"]["type"] for e in events(run)]
    assert kinds == ["start", "invoke", "invoke", "result", "invoke", "approval", "invoke", "result", "final_output", "end"], kinds
    rep = report(run)
    assert (rep["outcome"], rep["terminal"], rep["coverage"]) == ("completed", "written", "complete"), rep
    assert rep["steps"] == {"greet": {"assert": "pass", "visits": 1}, "write": {"assert": "pass", "visits": 1}}
    manifest = json.loads((Path(run.dir) / "run.json").read_text())
    assert manifest["adapter"]["name"] == ADAPTER and manifest["adapter"]["coverage"] == "complete", manifest["adapter"]
    verify(run.dir)
    assert end_run(run) == rp.Outcome.COMPLETED  # already ended by the Stop hook: nothing more recorded
    assert len(events(run)) == len(kinds)


def test_a_raising_approval_callback_blocks_the_gated_call(policy, tmp_path, clean_env):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")

    def approve(request):
        raise RuntimeError("the approvals service is down")

    session = Session(tmp_path, runbook_hooks(run, approve=approve)).run()
    assert session.result.subtype == "success", session.messages
    assert not (session.project / "greeting.txt").exists(), "the gated call ran"
    assert [r["is_error"] for r in session.results] == [True, False, True], session.results
    assert "approval callback failed (RuntimeError)" in session.results[2]["content"], session.results[2]
    # Recorded: the call held; no approval was fed; the Stop found the run at `write`, so it stays open
    # until the program ends it, incomplete.
    (held,) = invokes(run, "touch greeting.txt")
    assert held["decision"]["decision"] == "needs-approval"
    assert not [e for e in events(run) if e["event"]["type"] == "approval"]
    assert not run.over
    assert end_run(run) == rp.Outcome.INCOMPLETE
    assert report(run)["outcome"] == "incomplete"
    verify(run.dir)


class RaisingHooks(RunbookHooks):
    async def pre_tool_use(self, hook_input, tool_use_id, context):
        raise RuntimeError("the adapter broke")


def test_a_raising_hook_callback_blocks_the_tool_because_on_failure_is_block(policy, tmp_path, clean_env):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    hooks = RaisingHooks(run).matchers()
    assert all(m.on_failure == "block" for ms in hooks.values() for m in ms)
    session = Session(tmp_path, hooks, turns=SCRIPT[:1] + [{"text": "Blocked."}]).run()
    assert not (session.project / "pwned").exists(), "a raising PreToolUse callback let the call run"
    assert len(session.results) == 1 and session.results[0]["is_error"], session.results
    assert 'onFailure is "block"' in session.results[0]["content"], session.results[0]
    end_run(run)
    verify(run.dir)


def test_the_control_the_same_raising_callback_without_on_failure_lets_the_call_run(policy, tmp_path, clean_env):
    # What on_failure="block" changes: installed with the SDK's default (continue), a callback that raises
    # counts as no decision and the call runs. So what blocked it above was on_failure.
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    hooks = RaisingHooks(run)
    loose = {"PreToolUse": [HookMatcher(matcher=None, hooks=[hooks.pre_tool_use])]}
    session = Session(tmp_path, loose, turns=SCRIPT[:1] + [{"text": "Ran."}]).run()
    assert (session.project / "pwned").exists()
    end_run(run)


# -- the callbacks, fed directly ---------------------------------------------------------------------------


def call(coro):
    return asyncio.run(coro)


def pre(tool="Bash", tool_input=None, tool_use_id="toolu_1", **extra) -> dict:
    d = {"hook_event_name": "PreToolUse", "session_id": "s-1", "cwd": "/somewhere", "transcript_path": "/somewhere/t.jsonl",
         "tool_name": tool, "tool_input": tool_input if tool_input is not None else {"command": "echo hello"}, "tool_use_id": tool_use_id}
    d.update(extra)
    return d


def post(tool_input, response, tool_use_id="toolu_1") -> dict:
    return {"hook_event_name": "PostToolUse", "session_id": "s-1", "tool_name": "Bash", "tool_input": tool_input,
            "tool_response": response, "tool_use_id": tool_use_id}


def stop(active=False) -> dict:
    return {"hook_event_name": "Stop", "session_id": "s-1", "stop_hook_active": active, "last_assistant_message": "done"}


HELLO = {"stdout": "hello", "stderr": "", "interrupted": False}


def denied(answer: dict) -> str:
    out = answer["hookSpecificOutput"]
    assert (out["hookEventName"], out["permissionDecision"]) == ("PreToolUse", "deny"), answer
    return out["permissionDecisionReason"]


def greet(h: RunbookHooks):
    assert call(h.pre_tool_use(pre(), "toolu_1", None)) == {}
    assert call(h.post_tool_use(post({"command": "echo hello"}, HELLO), "toolu_1", None)) == {}
    assert h.run.state().step == "write"


def test_the_matchers_match_every_tool_block_on_failure_and_wait_longer_than_the_approval(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    hooks = runbook_hooks(run, approve=lambda r: ApprovalAnswer("alice", True), approval_timeout=100, hook_timeout=20)
    assert sorted(hooks) == ["PostToolUse", "PostToolUseFailure", "PreToolUse", "Stop"]
    for ms in hooks.values():
        assert [(m.matcher, m.on_failure, len(m.hooks)) for m in ms] == [(None, "block", 1)]
    assert hooks["PreToolUse"][0].timeout == 120 and hooks["PostToolUse"][0].timeout == 20
    assert COVERAGE == rp.COMPLETE
    end_run(run)
    verify(run.dir)


def without_paths(hook_input):
    """A hook input as the adapter records it when it is malformed: JSON, less the keys naming this machine's files."""
    if isinstance(hook_input, dict):
        hook_input = {k: v for k, v in hook_input.items() if k not in ("cwd", "transcript_path")}
    return json.dumps(hook_input, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "bad, why",
    [
        ({"hook_event_name": "PreToolUse", "session_id": "s-1", "tool_input": {"command": "echo hello"}}, "no `tool_name` string"),
        (pre(tool=7), "no `tool_name` string"),
        (pre(tool_input=["echo", "hello"]), "`tool_input` is not an object"),
        (pre(tool_input="echo hello"), "`tool_input` is not an object"),
        (pre(tool_use_id=5), "`tool_use_id` is not a string"),
        ("not an object", "not an object"),
    ],
    ids=["no-tool-name", "tool-name-not-text", "input-a-list", "input-a-string", "id-not-text", "not-an-object"],
)
def test_a_malformed_pre_tool_use_input_is_a_recorded_halt_never_an_allow(policy, tmp_path, bad, why):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run)
    reason = denied(call(h.pre_tool_use(bad, "toolu_1", None)))
    assert "malformed" in reason and why in reason, reason
    last = events(run)[-1]
    assert (last["decision"]["decision"], last["decision"]["reason"]) == ("halt", "malformed-event"), last
    # What was recorded (Run.feed_malformed: a line that is no event, stored as a JSON string) names the hook
    # and why, then holds the raw input, less this machine's paths.
    assert last["event"] == f"malformed Claude Agent SDK PreToolUse hook input ({why}): {without_paths(bad)}", last
    assert "/somewhere" not in json.dumps(last["event"])
    # After the halt nothing is allowed, even a call the runbook allows; it is recorded, answered halt.
    assert "runbook:" in denied(call(h.pre_tool_use(pre(), "toolu_2", None)))
    assert events(run)[-1]["decision"]["decision"] == "halt" and events(run)[-1]["event"]["type"] == "invoke"
    end_run(run)
    assert report(run)["outcome"] != "completed"
    verify(run.dir)


def test_a_malformed_post_tool_use_input_is_a_recorded_halt(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run)
    assert call(h.pre_tool_use(pre(), "toolu_1", None)) == {}
    bad = {k: v for k, v in post({"command": "echo hello"}, HELLO).items() if k != "tool_response"}
    answer = call(h.post_tool_use(bad, "toolu_1", None))
    assert answer["decision"] == "block" and "malformed" in answer["reason"], answer
    last = events(run)[-1]
    assert last["decision"]["reason"] == "malformed-event"
    assert last["event"] == f"malformed Claude Agent SDK PostToolUse hook input (no `tool_response`): {without_paths(bad)}", last
    # The run is halted: the next call is denied, recorded as a halt.
    assert "runbook:" in denied(call(h.pre_tool_use(pre(tool_use_id="toolu_2"), "toolu_2", None)))
    assert events(run)[-1]["decision"]["decision"] == "halt"
    end_run(run)
    verify(run.dir)


def test_a_malformed_stop_input_is_a_recorded_halt_and_ends_the_run(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run)
    assert "ended: failed" in call(h.stop(["not", "an object"], None, None))["systemMessage"]
    kinds = [(e["decision"]["decision"], e["decision"]["reason"]) for e in events(run)]
    assert kinds[-1] == ("halt", "malformed-event"), kinds
    assert events(run)[-1]["event"] == 'malformed Claude Agent SDK Stop hook input (not an object): ["not","an object"]'
    assert "is over" in denied(call(h.pre_tool_use(pre(), "toolu_1", None)))
    verify(run.dir)


def test_post_tool_use_failure_is_a_result_with_is_error(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run)
    assert call(h.pre_tool_use(pre(), "toolu_1", None)) == {}
    failure = {"hook_event_name": "PostToolUseFailure", "session_id": "s-1", "tool_name": "Bash", "tool_input": {"command": "echo hello"},
               "tool_use_id": "toolu_1", "error": "Exit code 3", "is_interrupt": False}
    call(h.post_tool_use_failure(failure, "toolu_1", None))
    last = events(run)[-1]["event"]
    assert (last["type"], last["result"], last["is_error"], last["call_id"]) == ("result", "Exit code 3", True, "toolu_1"), last
    # The step's assert (is_error false) failed, with no retry and no on_fail: the module halts the run,
    # and the answer tells the model to stop.
    end_run(run)
    verify(run.dir)


def test_an_approval_is_bound_to_the_call_and_only_that_call_runs(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    seen: list = []

    def approve(request):  # a plain function: run in a worker thread
        seen.append(request)
        return ApprovalAnswer("alice", True)

    h = RunbookHooks(run, approve=approve)
    greet(h)
    assert call(h.pre_tool_use(pre(tool_input=GREETING, tool_use_id="toolu_2"), "toolu_2", None)) == {}
    assert seen[0].call_sha256 == run.call_sha256("Bash", GREETING) == policy.call_sha256("Bash", GREETING)
    assert seen[0].step == "write" and seen[0].run_id == run.run_id
    end_run(run)
    verify(run.dir)


@pytest.mark.parametrize(
    "approve, says",
    [
        (None, "no approval callback"),
        (lambda r: ApprovalAnswer("bob", False), "refused to approve"),
        (lambda r: ApprovalAnswer("claude-agent-sdk", True), "was not accepted"),  # the agent approving itself
        (lambda r: None, "no ApprovalAnswer"),
        (lambda r: True, "no ApprovalAnswer"),
    ],
    ids=["no-callback", "declined", "self-approval", "no-answer", "a-bool"],
)
def test_a_gated_call_without_a_valid_grant_is_denied(policy, tmp_path, approve, says):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run, approve=approve)
    greet(h)
    reason = denied(call(h.pre_tool_use(pre(tool_input=GREETING, tool_use_id="toolu_2"), "toolu_2", None)))
    assert says in reason and run.call_sha256("Bash", GREETING) in reason, reason
    # One full stop between the module's sentence (with what followed it) and the adapter's: no ".;", no "..".
    assert ".;" not in reason and ".." not in reason and ". `Bash` with these exact arguments" in reason, reason
    # Never a second invoke of the call, so never an allow recorded for it.
    assert [e["decision"]["decision"] for e in invokes(run, GREETING["command"])] == ["needs-approval"]
    end_run(run)
    verify(run.dir)


def test_an_approval_that_does_not_come_in_time_denies_the_call(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")

    async def approve(request):
        await asyncio.sleep(30)
        return ApprovalAnswer("alice", True)

    h = RunbookHooks(run, approve=approve, approval_timeout=0.2)
    greet(h)
    t = time.monotonic()
    reason = denied(call(h.pre_tool_use(pre(tool_input=GREETING, tool_use_id="toolu_2"), "toolu_2", None)))
    assert time.monotonic() - t < 5
    assert "no approval came within 0.2 s" in reason, reason
    assert not [e for e in events(run) if e["event"]["type"] == "approval"]
    end_run(run)
    verify(run.dir)


def test_when_the_client_gives_up_on_the_callback_nothing_more_is_fed_for_the_call(policy, tmp_path):
    # The CLI's matcher timeout cancels the callback's task (measured: a CancelledError in the callback):
    # a person answering afterwards changes nothing on the record.
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    waiting = asyncio.Event()

    async def approve(request):
        waiting.set()
        await asyncio.sleep(30)
        return ApprovalAnswer("alice", True)

    h = RunbookHooks(run, approve=approve)
    greet(h)
    n = len(events(run))

    async def go():
        task = asyncio.ensure_future(h.pre_tool_use(pre(tool_input=GREETING, tool_use_id="toolu_2"), "toolu_2", None))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    call(go())
    assert [e["decision"]["decision"] for e in events(run)[n:]] == ["needs-approval"], "only the held invoke is recorded"
    end_run(run)
    verify(run.dir)


def test_stop_away_from_a_terminal_keeps_the_run_open_and_keep_working_blocks_it_once(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run, keep_working=True)
    answer = call(h.stop(stop(), None, None))
    assert answer["decision"] == "block" and "at step `greet`" in answer["reason"], answer
    assert not run.over
    # The model stopped again after being told to go on: not blocked twice.
    assert "systemMessage" in call(h.stop(stop(active=True), None, None))
    assert [e["event"]["type"] for e in events(run)] == ["start", "final_output", "final_output"]
    assert end_run(run) == rp.Outcome.INCOMPLETE
    verify(run.dir)


def test_after_the_run_is_over_every_call_is_denied(policy, tmp_path):
    run = create_run(policy, RUNBOOK, runs_root=tmp_path / "runs")
    h = RunbookHooks(run)
    end_run(run)
    n = len(events(run))
    assert "is over" in denied(call(h.pre_tool_use(pre(), "toolu_1", None)))
    assert call(h.post_tool_use(post({"command": "echo hello"}, HELLO), "toolu_1", None))["decision"] == "block"
    assert call(h.stop(stop(), None, None)) == {}
    assert len(events(run)) == n
    verify(run.dir)
