"""Run: bundles the CLI verifies, tampering it catches, refusals, broken runs, the guard, git state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import runbook_policy as rp

from .conftest import EXAMPLES, example_streams, replay, verify, verify_fails

ROTATE = EXAMPLES / "rotate-credentials" / "runbook.yaml"
ROTATE_CLAIM: Dict[str, Any] = dict(
    agent="claude-code",
    profile="R2",
    allowlist=["Bash", "mcp__vault__read_metadata", "mcp__slack__post_message"],
    risk_ceiling="destructive",
    coverage=rp.COMPLETE,
)
KUBECTL_GET = {"command": "kubectl -n payments get secret payments-db-credentials"}


def feed_stream(run: rp.Run, lines: List[str]) -> List[rp.Answer]:
    """Feeds a recorded stream (after its start line) through the Run's methods, as an adapter would."""
    answers = []
    for line in lines[1:]:
        e = json.loads(line)
        call_id = None if e.get("call_id") is None else str(e["call_id"])  # MCP ids may be numbers
        t = e["type"]
        if t == "invoke":
            a = run.invoke(e["tool"], e["arguments"], call_id=call_id, step=e.get("step"))
        elif t == "result":
            a = run.result(e["tool"], e["result"], e["is_error"], call_id=call_id)
        elif t == "approval":
            a = run.approval(e["approver"], e["granted"], step=e.get("step"), call_sha256=e.get("call_sha256"))
        elif t == "advance":
            a = run.advance(e["to"])
        elif t == "verdict":
            a = run.verdict(e["step"], e["outcome"] == "pass", e["by"])
        elif t == "final_output":
            a = run.final_output()
        elif t == "tick":
            a = run.tick()
        elif t == "end":
            outcome = run.end(e.get("reason", "normal"))
            assert run.finished and run.state().outcome is outcome
            continue
        else:
            raise AssertionError(t)
        answers.append(a)
    return answers


def recorded(run_dir: Path) -> List[tuple]:
    return rp._bundle.read_events((run_dir / "events.ndjson").read_bytes())


@pytest.mark.parametrize("doc,events", example_streams(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_example_run_through_run_decides_as_the_cli_and_verifies(policy: rp.Policy, cli: Path, workdir: Path, doc: Path, events: Path) -> None:
    lines = [l for l in events.read_text(encoding="utf-8").splitlines() if l.strip()]
    start = json.loads(lines[0])
    coverage = rp.COMPLETE if start["coverage"] == "complete" else rp.Blind(start["coverage"])
    run = rp.Run.create(
        policy, doc, agent=start["agent"], profile=start["profile"], allowlist=start["allowlist"], risk_ceiling=start["risk_ceiling"],
        coverage=coverage, available=start.get("available"), run_id=start["run_id"],
    )
    if run.start.allowed:
        feed_stream(run, lines)
    else:
        assert run.over and run.finished
    if not run.finished:
        run.end()
    cli_decisions, cli_report = replay(cli, doc, events)
    got = [d for _, _, d in recorded(run.dir)]
    assert got == cli_decisions[: len(got)]
    if len(got) == len(cli_decisions):
        assert (run.dir / "report.json").read_text() == cli_report
    out = verify(cli, run.dir)
    assert out["outcome"] == json.loads(run.report())["outcome"] and out["events"] == len(got)


def test_a_bundle_has_the_rust_hosts_layout_and_a_tampered_byte_fails_verify(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    lines = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    feed_stream(run, lines)
    assert run.finished and run.over and run.state().outcome is rp.Outcome.COMPLETED
    d = run.dir
    assert d == Path(".runbook/runs") / run.run_id and d.is_dir()
    assert sorted(p.name for p in d.iterdir()) == ["envelope.json", "events.ndjson", "receipt.json", "report.json", "run.json", "runbook.yaml"]
    assert (d / "runbook.yaml").read_bytes() == ROTATE.read_bytes()
    assert (d / "envelope.json").read_text() == policy.envelope(ROTATE.read_bytes())
    m = json.loads((d / "run.json").read_text())
    assert (d / "run.json").read_text() == json.dumps(m, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert m["host"] == {"name": "runbook-policy-python", "version": rp.__version__}
    assert m["adapter"] == {"name": "library", "sees": "what the embedding client feeds", "coverage": "complete"}
    assert m["document"] == {
        "reference": "runbook.yaml", "trust": "T1", "sha256": policy.lint(ROTATE.read_bytes()).sha256, "pinned_sha256": None,
        "file": "runbook.yaml", "runbook_id": "rotate-credentials", "version": "1.3.0",
        "provenance": {"kind": "file", "registry": None, "from_cache": None, "signed_by": None, "signature_expires": None},
    }
    assert [e["event"] for e in m["lifecycle"]] == ["created", "admitted", "ended"] and m["outcome"] == "completed"
    assert m["source"] == {"git": {"status": "not-a-checkout"}}
    receipt = (d / "receipt.json").read_text()
    assert policy.canonicalize(receipt) == receipt
    r = json.loads(receipt)
    assert r["host"] == m["host"] and r["module_sha256"] == rp.COMPONENT_SHA256 and r["chain_head"] == recorded(d)[-1][0]
    latest = json.loads(Path(".runbook/runs/latest.json").read_text())
    assert latest["run_id"] == run.run_id and latest["path"] == run.run_id
    history = [json.loads(l) for l in Path(".runbook/runs/history.ndjson").read_text().splitlines()]
    assert [(h["event"], h["run_id"]) for h in history] == [("created", run.run_id), ("ended", run.run_id)]
    assert not list(Path(".runbook/runs").rglob("*.tmp"))
    verify(cli, d)

    # One byte changed anywhere is caught, and named.
    for name, offset in [("events.ndjson", 300), ("report.json", 20), ("run.json", 40), ("runbook.yaml", 100), ("receipt.json", 30)]:
        copy = workdir / f"tampered-{name}" / run.run_id
        shutil.copytree(d, copy)
        data = bytearray((copy / name).read_bytes())
        data[offset] = ord("X") if data[offset] != ord("X") else ord("Y")
        (copy / name).write_bytes(bytes(data))
        out = verify_fails(cli, copy)
        assert out["failure"]["place"].split(":")[0] in (name, "receipt.json", "run.json", "envelope.json", "report.json"), (name, out["failure"])


def test_a_refused_start_is_a_finished_run_that_verifies(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **{**ROTATE_CLAIM, "profile": rp.Profile.R1, "coverage": rp.Blind(["shell"])})
    assert run.start.kind is rp.DecisionKind.HALT and run.start.decision.reason is rp.Reason.REFUSED
    assert run.start.decision.refusals == [rp.Refusal.COVERAGE_INCOMPLETE, rp.Refusal.PROFILE_TOO_LOW]
    assert run.over and run.finished and run.end() is rp.Outcome.REFUSED
    with pytest.raises(rp.PolicyError, match="sealed"):
        run.invoke("Bash", KUBECTL_GET)
    m = json.loads((run.dir / "run.json").read_text())
    assert [e["event"] for e in m["lifecycle"]] == ["created", "refused", "ended"] and m["outcome"] == "refused"
    assert m["adapter"]["coverage"] == ["shell"]
    assert verify(cli, run.dir)["outcome"] == "refused"


def test_an_invalid_document_is_refused_on_the_record(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, EXAMPLES / "broken" / "runbook.yaml", agent="a", profile="R2", risk_ceiling="irreversible", coverage=rp.COMPLETE)
    assert run.start.decision.refusals[0] is rp.Refusal.INVALID_DOCUMENT and run.over
    m = json.loads((run.dir / "run.json").read_text())
    assert m["artifacts"]["envelope"] is None and m["envelope_sha256"] is None and not (run.dir / "envelope.json").exists()
    verify(cli, run.dir)


def test_a_claim_that_cannot_be_fed_is_refused_before_any_file_exists(policy: rp.Policy, workdir: Path) -> None:
    with pytest.raises(ValueError, match="Start.profile"):
        rp.Run.create(policy, ROTATE, **{**ROTATE_CLAIM, "profile": "R7"})
    with pytest.raises(ValueError, match="run id"):
        rp.Run.create(policy, ROTATE, **ROTATE_CLAIM, run_id="../escape")
    assert not Path(".runbook").exists()
    with pytest.raises(TypeError):
        rp.Run.create(policy, ROTATE, profile="R2", risk_ceiling="destructive", coverage=rp.COMPLETE)  # type: ignore[call-arg]


def test_bundle_creation_failures_and_an_existing_run_id_break_the_run(policy: rp.Policy, workdir: Path) -> None:
    Path("not-a-dir").write_text("x")
    with pytest.raises(rp.RunBroken, match="cannot create the run bundle"):
        rp.Run.create(policy, ROTATE, **ROTATE_CLAIM, runs_root="not-a-dir")
    rp.Run.create(policy, ROTATE, **ROTATE_CLAIM, run_id="r-same").end()
    with pytest.raises(rp.RunBroken, match="exists"):
        rp.Run.create(policy, ROTATE, **ROTATE_CLAIM, run_id="r-same")


@pytest.mark.parametrize("how", ["directory removed", "events file replaced by a directory", "events file replaced by another file"])
def test_a_failed_write_breaks_the_run_for_good(policy: rp.Policy, cli: Path, workdir: Path, how: str) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    assert run.invoke("Bash", KUBECTL_GET, call_id="t1").allowed
    events = run.dir / "events.ndjson"
    if how == "directory removed":
        shutil.rmtree(run.dir)
    elif how == "events file replaced by a directory":
        events.unlink()
        events.mkdir()
    else:
        other = run.dir / "other.ndjson"
        other.write_bytes(events.read_bytes())
        os.replace(other, events)
    with pytest.raises(rp.RunBroken) as e:
        run.result("Bash", {"stdout": "payments-db-credentials\n", "stderr": "", "interrupted": False}, call_id="t1")
    assert e.value.code == "run-broken" and "cannot record the event" in str(e.value) and run.run_id in str(e.value)
    assert run.broken is e.value and run.over
    for later in (lambda: run.invoke("Bash", KUBECTL_GET), run.state, run.report, run.end, run.final_output):
        with pytest.raises(rp.RunBroken) as again:
            later()
        assert again.value is e.value
    if how == "events file replaced by another file":
        assert "replaced" in str(e.value)
        verify_fails(cli, run.dir)


def test_a_trap_breaks_the_run_and_its_bundle_never_verifies(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    run._session._inst.fuel = 1_000  # white box: starve the module's next call
    with pytest.raises(rp.RunBroken, match="trapped"):
        run.invoke("Bash", KUBECTL_GET)
    assert run.finished and run.over
    m = json.loads((run.dir / "run.json").read_text())
    assert m["ended_without_report"] == "host-trap" and m["lifecycle"][-1]["event"] == "ended"
    assert verify_fails(cli, run.dir)["failure"]["place"] == "report.json"
    history = [json.loads(l) for l in Path(".runbook/runs/history.ndjson").read_text().splitlines()]
    assert history[-1]["ended_without_report"] == "host-trap"


def test_arguments_that_are_not_json_are_a_recorded_halt(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    a = run.invoke("Bash", {"command": {"kubectl", "get"}}, call_id="t1")
    assert a.kind is rp.DecisionKind.HALT and a.decision.reason is rp.Reason.MALFORMED_EVENT and not a.allowed
    assert a.event_line.startswith('malformed invoke of tool "Bash": TypeError') and "\n" not in a.event_line
    assert run.over
    assert run.invoke("Bash", KUBECTL_GET).kind is rp.DecisionKind.HALT  # nothing is allowed after it
    assert run.result("Bash", float("inf")).decision.reason is rp.Reason.HALTED
    assert run.invoke(None, {}).kind is rp.DecisionKind.HALT  # type: ignore[arg-type]
    assert run.invoke("Bash\ud800", {"command": "\udc00"}).kind is rp.DecisionKind.HALT  # not UTF-8: still on the record
    assert run.invoke("Bash", {"command": "x"}, call_id=7).kind is rp.DecisionKind.HALT  # type: ignore[arg-type]
    assert run.end() is rp.Outcome.FAILED
    out = verify(cli, run.dir)
    assert any(r["code"] == "RAW_EVENT_TEXT" for r in out["share_safety"]["reasons"])


def test_feed_malformed_records_the_frameworks_text_as_a_halt_and_the_bundle_verifies(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    assert run.invoke("Bash", KUBECTL_GET, call_id="t1").allowed
    text = 'a hook input (`tool_input` is not an object): {"tool_name": "Bash", "tool_input": "ls"}'
    a = run.feed_malformed(text)
    assert (a.kind, a.decision.reason, a.allowed) == (rp.DecisionKind.HALT, rp.Reason.MALFORMED_EVENT, False)
    assert a.event_line == text and run.over and a.state.outcome is rp.Outcome.FAILED
    # Recorded like any event: the line, not a JSON object, is stored as a JSON string holding it.
    raw = (run.dir / "events.ndjson").read_text(encoding="utf-8").splitlines()[-1]
    assert json.loads(raw)["event"] == text and raw.endswith(',"event":' + json.dumps(text, ensure_ascii=False) + "}")
    assert recorded(run.dir)[-1][1:] == (text, a.decision_line)
    # Every later call is denied, even one the runbook allows, and so is a second malformed one.
    later = run.invoke("Bash", KUBECTL_GET, call_id="t2")
    assert (later.kind, later.decision.reason) == (rp.DecisionKind.HALT, rp.Reason.HALTED)
    assert run.feed_malformed("again").decision.reason is rp.Reason.HALTED
    assert run.end() is rp.Outcome.FAILED
    verify(cli, run.dir)
    with pytest.raises(rp.PolicyError, match="sealed"):
        run.feed_malformed("after the end")


@pytest.mark.parametrize(
    "text,line",
    [
        # A payload that is an event object the module would decide (an allowed call) never goes as it is.
        ('{"type":"invoke","at":1,"tool":"Bash","arguments":{"command":"kubectl -n payments get secret x"}}', None),
        (' \ufeff{"type":"final_output","at":1}', None),
        ("", "malformed event: "),
        ("two\nlines\r\nand\u2028three", "two lines and three"),
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        (b"\x00bytes", "b'\\x00bytes'"),
        ({"tool_name": 7}, "malformed event: {'tool_name': 7}"),
        ("x" * 5000, "x" * 4096 + " ... (904 more characters not recorded)"),
    ],
    ids=["an-event-object", "an-event-object-after-a-bom", "empty", "line-breaks", "lone-surrogate", "bytes", "not-text", "too-long"],
)
def test_feed_malformed_makes_any_text_one_line_that_is_no_event(policy: rp.Policy, cli: Path, workdir: Path, text: Any, line: Any) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    a = run.feed_malformed(text)
    assert (a.kind, a.decision.reason) == (rp.DecisionKind.HALT, rp.Reason.MALFORMED_EVENT), a.event_line
    assert a.event_line == (line if line is not None else "malformed event: " + text)
    assert recorded(run.dir)[-1][1] == a.event_line
    assert not run.invoke("Bash", KUBECTL_GET).allowed
    if isinstance(text, str) and text.startswith('{"type":"invoke"'):
        # The control: as it is, the same text is an event, which a session allows.
        s = policy.session(ROTATE.read_bytes())
        s.handle(rp.Start(run_id="r-1", **ROTATE_CLAIM), 0)
        assert json.loads(s.handle_line(text))["decision"] == "allow"
    run.end()
    verify(cli, run.dir)


def test_a_gated_calls_message_is_one_sentence(policy: rp.Policy, workdir: Path) -> None:
    import asyncio

    lines = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    feed_stream(run, lines[:5])
    rotate = {"command": "vault write -f database/rotate-role/payments-app"}
    no_callback = asyncio.run(run.invoke_with_approval("Bash", rotate, call_id="c1"))
    refused = asyncio.run(run.invoke_with_approval("Bash", rotate, call_id="c2", approve=lambda r: rp.ApprovalAnswer("bob", False)))
    itself = asyncio.run(run.invoke_with_approval("Bash", rotate, call_id="c3", approve=lambda r: rp.ApprovalAnswer("claude-code", True)))
    assert no_callback.answer.explanation.endswith(".")  # the module's sentence, with its full stop
    for g, says in [(no_callback, "; no approval callback was given"), (refused, "; a human refused"), (itself, "; the approval was not accepted: ")]:
        assert not g.allowed and says in g.message, g.message
        assert ".;" not in g.message and g.message.endswith(".") and not g.message.endswith(".."), g.message
    run.end(rp.EndReason.INTERRUPTED)


def test_the_guard_denies_calls_that_name_the_evidence_or_the_host(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    guarded = [
        {"command": "kubectl -n payments get secret payments-db-credentials > .runbook/runs/x"},
        {"command": f"cat ./{run.dir}/events.ndjson"},
        {"command": f"rm -rf {(workdir / '.runbook' / 'runs').resolve()}"},
        {"command": "runbook-host approve latest rotate"},
        {".runbook/runs": "as a key"},
    ]
    for args in guarded:
        a = run.invoke("Bash", args)
        assert (a.kind, a.decision.deviation, a.decision.reason) == (rp.DecisionKind.DENY, rp.Deviation.UNDECLARED_TOOL, rp.Reason.GUARDED), args
    assert run.invoke("runbook-host", {}).decision.reason is rp.Reason.GUARDED
    assert run.invoke("Bash", KUBECTL_GET).allowed
    assert ".runbook/runs" in run.guard.needles and "runbook-host" in run.guard.needles
    run.end()
    verify(cli, run.dir)


def test_an_approval_bound_to_the_calls_hash_admits_that_call(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    lines = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    feed_stream(run, lines[:5])
    rotate = {"command": "vault write -f database/rotate-role/payments-app"}
    held = run.invoke("Bash", rotate, call_id="c1")
    assert held.kind is rp.DecisionKind.NEEDS_APPROVAL and held.call_sha256 == policy.call_sha256("Bash", rotate) == run.call_sha256("Bash", rotate)
    other = run.approval("alice", True, step="rotate", call_sha256=policy.call_sha256("Bash", {"command": "vault write -f x"}))
    assert run.invoke("Bash", rotate, call_id="c2").kind is rp.DecisionKind.NEEDS_APPROVAL, other
    assert run.approval("alice", True, step="rotate", call_sha256=held.call_sha256).allowed
    assert run.invoke("Bash", rotate, call_id="c3").allowed
    run.end(rp.EndReason.INTERRUPTED)
    report = json.loads(run.report())
    assert [a["call_sha256"] for a in report["approvals"]][-1] == held.call_sha256
    verify(cli, run.dir)


def test_the_with_block_ends_the_run_interrupted_when_it_raises(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    with pytest.raises(RuntimeError):
        with rp.Run.create(policy, ROTATE, **ROTATE_CLAIM) as run:
            run.invoke("Bash", KUBECTL_GET)
            raise RuntimeError("the agent crashed")
    assert run.finished and run.state().outcome is rp.Outcome.INCOMPLETE
    events = recorded(run.dir)
    assert json.loads(events[-1][1]) == {"at": json.loads(events[-1][1])["at"], "reason": "interrupted", "type": "end"}
    verify(cli, run.dir)
    with rp.Run.create(policy, ROTATE, **ROTATE_CLAIM) as second:
        pass
    assert second.finished and json.loads(Path(".runbook/runs/latest.json").read_text())["run_id"] == second.run_id
    assert len(Path(".runbook/runs/history.ndjson").read_text().splitlines()) == 4


def test_the_runs_clock_is_monotonic_milliseconds_and_deadlines_tick(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    doc = workdir / "deadline.yaml"
    doc.write_text(
        "runbook_id: deadline\nversion: 1.0.0\ncapabilities: [{name: report, tool: report.send, risk: read-only}]\n"
        "checkpoints:\n  - {id: cp-sent, kind: tool_call, required: true, match: {tool: report.send}, timeout_ms: 200}\n"
    )
    run = rp.Run.create(policy, doc, agent="a", profile="R1", risk_ceiling="read-only", coverage=rp.COMPLETE)
    assert run.state().next_deadline in (200, 201)  # the first `at` that fails it
    a = run.tick_if_due()  # None unless this machine took 200 ms since the start
    if a is None:
        time.sleep(0.25)
        a = run.tick_if_due()
    assert a is not None and a.decision.reason is rp.Reason.CHECKPOINT_TIMEOUT and run.over
    assert run.tick_if_due() is None
    ats = [json.loads(e)["at"] for _, e, _ in recorded(run.dir)]
    assert ats == sorted(ats) and ats[0] == 0 and ats[-1] >= 200
    assert run.end() is rp.Outcome.FAILED
    verify(cli, run.dir)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed: the counts cannot be measured")
def test_run_json_holds_the_git_state_as_counts_only(policy: rp.Policy, cli: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(workdir, "init", "-q")
    (workdir / "committed.txt").write_text("1")
    (workdir / "renamed.txt").write_text("r")
    git(workdir, "add", ".")
    git(workdir, "commit", "-q", "-m", "one")
    (workdir / "committed.txt").write_text("2")  # unstaged
    (workdir / "staged.txt").write_text("s")
    git(workdir, "add", "staged.txt")  # staged
    git(workdir, "mv", "renamed.txt", "moved.txt")  # staged rename (two fields in -z output)
    (workdir / "untracked.txt").write_text("u")
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    run.end()
    m = json.loads((run.dir / "run.json").read_text())
    assert m["source"]["git"] == {"status": "dirty", "staged": 2, "unstaged": 1, "untracked": 1, "total": 4}
    assert "committed.txt" not in (run.dir / "run.json").read_text()
    verify(cli, run.dir)
    monkeypatch.setenv("PATH", str(workdir / "no-bin"))
    second = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    assert json.loads((second.dir / "run.json").read_text())["source"]["git"] == {"status": "unavailable"}


def test_a_pinned_document_is_recorded_as_trust_t2_and_a_pin_of_other_bytes_is_refused(policy: rp.Policy, tmp_path: Path, cli: Path) -> None:
    import hashlib
    import json

    doc = (EXAMPLES / "read-only-investigation" / "runbook.yaml").read_bytes()
    sha = hashlib.sha256(doc).hexdigest()
    claim = dict(agent="a", profile="R2", risk_ceiling="irreversible", coverage=rp.COMPLETE, reference="read-only-investigation@0.4.0")
    with pytest.raises(ValueError, match="pinned"):
        rp.Run.create(policy, doc, runs_root=tmp_path / "runs", pinned_sha256="0" * 64, **claim)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "nothing is written for a refused pin"
    run = rp.Run.create(policy, doc, runs_root=tmp_path / "runs", pinned_sha256=sha, **claim)
    run.end()
    manifest = json.loads((run.dir / "run.json").read_text())
    assert (manifest["document"]["trust"], manifest["document"]["pinned_sha256"]) == ("T2", sha)
    assert verify(cli, run.dir)["ok"] is True


class ManualClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def fixed_run(policy: rp.Policy, runs: Path, **kw: Any) -> rp.Run:
    """The rotate-credentials stream through a Run whose every fact is fixed: every byte of its bundle."""
    lines = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()
    clock = ManualClock(1_796_169_600_000)
    run = rp.Run.create(policy, ROTATE, runs_root=runs, run_id="r-fixed", clock=clock, git={"status": "not-a-checkout"}, **ROTATE_CLAIM, **kw)
    for line in lines[1:]:
        e = json.loads(line)
        clock.ms = 1_796_169_600_000 + e["at"]
        if e["type"] == "end":
            run.end(e["reason"])
        else:
            feed_stream(run, [lines[0], line])
    return run


def tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_fixed_facts_write_the_same_bundle_byte_for_byte_and_every_time_is_the_clocks(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    a, b = fixed_run(policy, workdir / "a"), fixed_run(policy, workdir / "b")
    assert a.state().outcome is rp.Outcome.COMPLETED
    files = tree(workdir / "a")
    assert files == tree(workdir / "b")
    assert sorted(files) == [
        "history.ndjson", "latest.json", *(f"r-fixed/{n}" for n in ["envelope.json", "events.ndjson", "receipt.json", "report.json", "run.json", "runbook.yaml"])
    ]
    m = json.loads(files["r-fixed/run.json"])
    assert [(e["event"], e["at"]) for e in m["lifecycle"]] == [
        ("created", "2026-12-02T00:00:00.000Z"), ("admitted", "2026-12-02T00:00:00.000Z"), ("ended", "2026-12-02T00:01:43.100Z")
    ]
    assert json.loads(files["latest.json"])["updated_at"] == "2026-12-02T00:01:43.100Z"
    want = [json.loads(l)["at"] for l in (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()]
    assert [json.loads(e)["at"] for _, e, _ in recorded(a.dir)] == want
    # The approval names the module's request, as the Rust host's does.
    approval = next(json.loads(e) for _, e, _ in recorded(a.dir) if '"approval"' in e)
    assert approval["request"] == 5
    verify(cli, a.dir)
    # The host's name and version are facts too.
    c = fixed_run(policy, workdir / "c", host=("runbook-policy-python", "9.9.9"))
    assert json.loads((c.dir / "receipt.json").read_text())["host"] == {"name": "runbook-policy-python", "version": "9.9.9"}
    with pytest.raises(rp.PolicyError, match="Unix milliseconds"):
        rp.Run.create(policy, ROTATE, runs_root=workdir / "d", clock=lambda: 1.5, **ROTATE_CLAIM)  # type: ignore[arg-type,return-value]


def test_needles_added_after_creation_guard_the_next_call(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    call = {"command": "kubectl -n payments get secret payments-db-credentials", "env": "VAULT_TOKEN_FILE"}
    assert run.invoke("Bash", call).allowed
    run.guard.add_name("VAULT_TOKEN_FILE")
    a = run.invoke("Bash", call)
    assert (a.kind, a.decision.reason) == (rp.DecisionKind.DENY, rp.Reason.GUARDED) and json.loads(a.event_line)["guard"] is True
    run.end()
    verify(cli, run.dir)


def test_feed_line_records_a_raw_line_exactly(policy: rp.Policy, cli: Path, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, **ROTATE_CLAIM)
    tick = '{"type":"tick","at":5}'
    a = run.feed_line(tick)
    assert a.allowed and a.event_line == tick
    assert (run.dir / "events.ndjson").read_text().splitlines()[-1].endswith(',"event":' + tick + "}")
    b = run.feed_line("{not json")
    assert (b.kind, b.decision.reason) == (rp.DecisionKind.HALT, rp.Reason.MALFORMED_EVENT) and recorded(run.dir)[-1][1] == "{not json"
    with pytest.raises(TypeError):
        run.feed_line(b"bytes")  # type: ignore[arg-type]
    run.end()
    verify(cli, run.dir)


def test_effects_stay_under_the_runs_root_and_a_signature_fails_closed(workdir: Path) -> None:
    from runbook_policy import _bundle

    root = _bundle._Dir(workdir)
    dirs: Dict[str, Any] = {}
    for path in ["../escape", "/abs", "a/b/c", "", ".hidden", "a/..", "a//b"]:
        with pytest.raises(_bundle.EffectFailed, match="the module named"):
            _bundle.apply(root, [rp.Effect(rp.EffectOp.WRITE, path, b"x")], dirs)
    _bundle.apply(root, [rp.Effect(rp.EffectOp.CREATE_DIR, "r-1", b""), rp.Effect(rp.EffectOp.APPEND, "r-1/log", b"one\n")], dirs)
    with pytest.raises(_bundle.EffectFailed) as e:
        _bundle.apply(root, [rp.Effect(rp.EffectOp.WRITE, "r-1/a", b"a"), rp.Effect(rp.EffectOp.SIGN, "r-1/receipt.dsse.json", b"{}")], dirs)
    assert e.value.index == 1 and "receipt key" in str(e.value)
    assert (workdir / "r-1" / "a").read_bytes() == b"a" and not (workdir / "r-1" / "receipt.dsse.json").exists()
    with pytest.raises(_bundle.EffectFailed, match="exists"):
        _bundle.apply(root, [rp.Effect(rp.EffectOp.CREATE_DIR, "r-1", b"")], dirs)
    assert (workdir / "r-1" / "log").read_bytes() == b"one\n" and not list(workdir.rglob("*.tmp"))
    assert sorted(p.name for p in workdir.iterdir()) == ["r-1"]


RUNNER = EXAMPLES.parent / "conformance" / "vectors" / "run" / "runners" / "python.py"


def test_the_whole_run_runner_writes_the_same_bundle_twice(cli: Path, workdir: Path) -> None:
    import sys

    vector = workdir / "vector"
    vector.mkdir()
    shutil.copy(ROTATE, vector / "runbook.yaml")
    steps: List[Dict[str, Any]] = [
        {"at": 10, "invoke": {"tool": "Bash", "arguments": KUBECTL_GET, "call_id": "c1", "step": None}},
        {"at": 20, "result": {"tool": "Bash", "result": {"stdout": "payments-db-credentials\n"}, "is_error": False, "call_id": "c1"}},
        {"at": 30, "invoke": {"tool": "Bash", "arguments": {"command": "rm -rf /"}, "call_id": "c2", "step": None}},
        {"at": 40, "tick": True},
        {"at": 50, "line": "not an event"},
        {"at": 60, "leave": {"calls_in_flight": 1, "last_call_timed_out": False}},
    ]
    script = {
        "document": "runbook.yaml", "adapter": "library",
        "facts": {"run_id": "r-20261202T000000Z-000000000001", "t0": 1796169600000, "host": {"name": "runbook-policy-python", "version": "1"},
                  "git": {"status": "not-a-checkout"}, "reference": "runbook.yaml"},
        "claim": {**{k: v for k, v in ROTATE_CLAIM.items() if k != "coverage"}, "coverage": "complete", "available": None},
        "steps": steps,
    }
    (vector / "script.json").write_text(json.dumps(script))
    outs = []
    for name in ("one", "two"):
        p = subprocess.run([sys.executable, str(RUNNER), str(vector), str(workdir / name)], capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        outs.append(tree(workdir / name))
    assert outs[0] == outs[1] and "r-20261202T000000Z-000000000001/receipt.json" in outs[0]
    run_dir = workdir / "one" / "r-20261202T000000Z-000000000001"
    events = [json.loads(e) if e.startswith("{") else e for _, e, _ in recorded(run_dir)]
    assert [e if isinstance(e, str) else e["type"] for e in events] == ["start", "invoke", "result", "invoke", "tick", "not an event"]
    assert verify(cli, run_dir)["outcome"] == "failed"
    p = subprocess.run([sys.executable, str(RUNNER), str(vector), str(workdir / "one")], capture_output=True, timeout=120)
    assert p.returncode == 1 and b"exists" in p.stderr
