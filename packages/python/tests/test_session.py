"""Sessions decide exactly as `runbook-host replay`: the typed path, the wire path, snapshots and traps."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import List, Tuple

import pytest

import runbook_policy as rp
from runbook_policy import _wasm
from runbook_policy import (
    Advance,
    Approval,
    Blind,
    End,
    FinalOutput,
    Invoke,
    Result,
    Start,
    Tick,
    Verdict,
)

from .conftest import EXAMPLES, example_streams, replay

Stream = List[Tuple[int, rp.Event]]

# Hand-written runs of the example documents, as typed events with their `at`. Each is encoded by the
# module (`encode_event`) into the lines the CLI replays; the session must decide them as the CLI does.
HAND_WRITTEN: List[Tuple[str, str, Stream, List[str]]] = [
    (
        "read-only-investigation at R1: the client routes; an out-of-scope call is denied",
        "read-only-investigation/runbook.yaml",
        [
            (0, Start("r-ro", rp.Profile.R1, ["*"], rp.Risk.READ_ONLY, rp.COMPLETE, "agent-1")),
            (10, Invoke("Bash", {"command": "df -h /var"}, call_id="a1")),
            (20, Result("Bash", {"stdout": "/dev/sda3 40G 38G 95% /var\n", "stderr": "", "interrupted": False}, call_id="a1")),
            (30, Invoke("Bash", {"command": "du -xsh /var/log"}, call_id="a2")),
            (40, Advance("largest-dirs")),
            (50, Invoke("Bash", {"command": "du -xsh /var/log"}, call_id="a3")),
            (60, Result("Bash", {"stdout": "31G\t/var/log\n"}, call_id="a3")),
            (70, Advance("read-logs")),
            (80, Invoke("Read", {"file_path": "/var/log/app/worker.log"}, call_id="a4")),
            (90, Result("Read", {"type": "text"}, call_id="a4")),
            (95, Invoke("Read", {"file_path": "/etc/shadow"}, call_id="a5")),
            (100, Advance("findings-recorded")),
            (110, FinalOutput()),
            (120, End()),
        ],
        ["out-of-scope-tool", "undeclared-tool"],
    ),
    (
        "certificate-renewal: a checkpoint that times out fails the run",
        "certificate-renewal/runbook.yaml",
        [
            (0, Start("r-cert", "R2", ["*"], "mutating", rp.COMPLETE, "ops-agent", available=["acme.renew"])),
            (500, Invoke("tls.inspect", {"host": "shop.example.com", "port": 443}, call_id="c1")),
            (900, Result("tls.inspect", {"days_left": 12}, call_id="c1")),
            (700_000, Tick()),
            (700_100, Invoke("acme.renew", {"names": ["shop.example.com"]}, call_id="c2")),
            (700_200, End(rp.EndReason.INTERRUPTED)),
        ],
        ["checkpoint-timeout"],
    ),
    (
        "certificate-renewal: a prose-only step waits for a human's verdict, never the agent's",
        "certificate-renewal/runbook.yaml",
        [
            (0, Start("r-cert-2", "R2", ["tls.inspect", "acme.renew", "lb.load_certificate"], "mutating", rp.COMPLETE, "ops-agent", available=["acme.renew"])),
            (1, Invoke("tls.inspect", {"host": "shop.example.com"}, call_id="c1")),
            (2, Result("tls.inspect", {"days_left": 3}, call_id="c1")),
            (3, Invoke("acme.renew", {"names": ["shop.example.com"]}, call_id="c2")),
            (4, Result("acme.renew", {"status": "issued", "names": ["shop.example.com"]}, call_id="c2")),
            (5, Invoke("lb.load_certificate", {"listener": "https"}, call_id="c3")),
            (6, Result("lb.load_certificate", {"active_serial": "04"}, call_id="c3")),
            (7, Verdict("deploy", True, "ops-agent")),
            (8, Approval("bob", True, step="deploy")),
            (9, Verdict("deploy", True, "bob")),
            (10, FinalOutput()),
            (11, End()),
        ],
        ["needs-verdict", "self-approval"],
    ),
    (
        "rotate-credentials: self-approval refused, a step-wide approval, then `at` going backwards halts",
        "rotate-credentials/runbook.yaml",
        [
            (0, Start("r-rot", "R2", ["Bash", "mcp__vault__read_metadata", "mcp__slack__post_message"], "destructive", rp.COMPLETE, "claude-code")),
            (1, Invoke("Bash", {"command": "kubectl -n payments get secret payments-db-credentials"}, call_id="t1")),
            (2, Result("Bash", {"stdout": "payments-db-credentials Opaque 2 97d\n", "stderr": "", "interrupted": False}, call_id="t1")),
            (3, Invoke("mcp__vault__read_metadata", {"path": "database/creds/payments-app"}, call_id="t2")),
            (4, Result("mcp__vault__read_metadata", {"age_days": 97}, call_id="t2")),
            (5, Invoke("Bash", {"command": "vault write -f database/rotate-role/payments-app"}, call_id="t3")),
            (6, Approval("claude-code", True, step="rotate")),
            (7, Approval("alice", True, step="rotate")),
            (8, Invoke("Bash", {"command": "vault write -f database/rotate-role/payments-app"}, call_id="t4", guard=True)),
            (9, Invoke("Bash", {"command": "vault write -f database/rotate-role/payments-app"}, call_id="t5")),
            (3, Result("Bash", {"stdout": "Success! Data written to: database/rotate-role/payments-app\n"}, call_id="t5")),
            (10, Invoke("Bash", {"command": "kubectl -n payments rollout restart deployment/payments-api"}, call_id="t6")),
            (11, End()),
        ],
        ["needs-approval", "self-approval", "guarded", "malformed-event"],
    ),
    (
        "incident-rollback: health never recovers, the retry budget runs out, on_fail escalates",
        "incident-rollback/runbook.yaml",
        [
            (0, Start("r-inc", "R2", ["*"], "mutating", rp.COMPLETE, "sre-bot")),
            (1, Invoke("deploy.history", {"service": "checkout"}, call_id=None)),
            (2, Result("deploy.history", {"releases": [{"status": "live"}, {"status": "previous"}]})),
            (3, Invoke("deploy.rollback", {"to": "previous"})),
            (4, Result("deploy.rollback", {"status": "rolled_back"})),
            *[
                ev
                for i in range(3)
                for ev in (
                    (10 + 2 * i, Invoke("metrics.query", {"window": "5m"})),
                    (11 + 2 * i, Result("metrics.query", {"error_rate": 0.2, "p99_ms": 2400})),
                )
            ],
            (20, Invoke("pager.resolve", {"note": "rolled back"})),
            (21, Invoke("pager.escalate", {"to": "secondary"})),
            (22, Result("pager.escalate", {"escalated": True})),
            (23, End()),
        ],
        ["budget-exhausted", "out-of-scope-tool"],
    ),
    (
        "executive-snapshot (no steps): blind to the shell at R1, a tool error, then the answer",
        "executive-snapshot/runbook.json",
        [
            (0, Start("r-exec", "R1", ["quickbooks_profit_and_loss"], "mutating", Blind(["shell"]), "finance-assistant")),
            (1, Invoke("quickbooks_profit_and_loss", {"start_date": "2024-07-01"}, call_id="r1")),
            (2, Result("quickbooks_profit_and_loss", {"error": "rate limited"}, is_error=True, call_id="r1")),
            (3, Invoke("send_email", {"to": "cfo@example.com"}, call_id="r2")),
            (4, Invoke("quickbooks_profit_and_loss", {"start_date": "2024-07-01"}, call_id="r3")),
            (5, Result("quickbooks_profit_and_loss", {"net_income": 372256.45}, call_id="r3")),
            (6, FinalOutput()),
            (7, End()),
        ],
        ["undeclared-tool"],
    ),
]


def encode(policy: rp.Policy, stream: Stream) -> List[str]:
    return [policy.encode_event(ev, at) for at, ev in stream]


@pytest.mark.parametrize("title,doc,stream,codes", HAND_WRITTEN, ids=[h[1].split("/")[0] + f"-{i}" for i, h in enumerate(HAND_WRITTEN)])
def test_a_hand_written_run_is_decided_as_the_cli_replays_it(policy: rp.Policy, cli: Path, tmp_path: Path, title: str, doc: str, stream: Stream, codes: List[str]) -> None:
    path = EXAMPLES / doc
    data = path.read_bytes()
    lines = encode(policy, stream)
    events = tmp_path / "events.ndjson"
    events.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    cli_decisions, cli_report = replay(cli, path, events)
    assert len(cli_decisions) == len(stream)

    # The typed path (handle): decisions as records, equal to the CLI's lines field by field.
    typed = policy.session(data)
    for (at, ev), line in zip(stream, cli_decisions):
        d = typed.handle(ev, at)
        want = json.loads(line)
        assert [d.seq, d.kind.value, d.step, d.deviation and d.deviation.value, d.reason and d.reason.value, [r.value for r in d.refusals]] == [
            want["seq"], want["decision"], want["step"], want["deviation"], want["reason"], want["refusals"]
        ], (title, line)
    assert typed.report() == cli_report

    # The typed path with the record (feed): the CLI's decision lines byte for byte, the module's links.
    fed = policy.session(data)
    prev = "0" * 64
    for (at, ev), line, ev_line in zip(stream, cli_decisions, lines):
        rec = fed.feed(ev, at, prev)
        assert rec.decision_line == line and rec.event_line == ev_line
        assert rec.link == policy.chain_link(prev, ev_line, line)
        assert rec.explanation and rec.state.events == rec.decision.seq + 1
        prev = rec.link
    assert fed.report() == cli_report

    # The wire path.
    wire = policy.session(data)
    assert [wire.handle_line(l) for l in lines] == cli_decisions
    assert wire.report() == cli_report
    assert wire.is_over()

    seen = {c for l in cli_decisions for c in (json.loads(l)["deviation"], json.loads(l)["reason"], json.loads(l)["decision"]) if c}
    assert set(codes) <= seen, (title, seen)


@pytest.mark.parametrize("doc,events", example_streams(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_stream_replays_as_the_cli_and_survives_every_snapshot(policy: rp.Policy, cli: Path, doc: Path, events: Path) -> None:
    cli_decisions, cli_report = replay(cli, doc, events)
    lines = [l for l in events.read_text(encoding="utf-8").split("\n") if l.strip()]
    data = doc.read_bytes()
    s = policy.session(data)
    assert [s.handle_line(l) for l in lines] == cli_decisions
    assert s.report() == cli_report
    # Split at every point: snapshot, restore in a fresh instance, go on; the same bytes come out.
    for k in range(len(lines) + 1):
        first = policy.session(data)
        got = [first.handle_line(l) for l in lines[:k]]
        snap = first.snapshot()
        first.close()
        second = rp.Session.restore(policy, data, snap)
        got += [second.handle_line(l) for l in lines[k:]]
        assert got == cli_decisions, k
        assert second.report() == cli_report, k


def test_replay_line_gives_the_feed_lines_link(policy: rp.Policy) -> None:
    doc = (EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes()
    lines = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()
    a, b = policy.session(doc), policy.session(doc)
    prev_a = prev_b = "1" * 64
    for l in lines:
        rec = a.feed_line(l, prev_a)
        d, link = b.replay_line(l, prev_b)
        assert (d, link) == (rec.decision_line, rec.link) and rec.event_line == l
        prev_a, prev_b = rec.link, link


def test_a_snapshot_restored_continues_a_typed_run_identically(policy: rp.Policy) -> None:
    _, doc, stream, _ = HAND_WRITTEN[3]
    data = (EXAMPLES / doc).read_bytes()
    whole = policy.session(data)
    want = [whole.handle(ev, at) for at, ev in stream]
    first = policy.session(data)
    got = [first.handle(ev, at) for at, ev in stream[:6]]
    state_before = first.state()
    snap = first.snapshot()
    second = rp.Session.restore(policy, data, snap)
    assert second.state() == state_before and second.status() == first.status()
    got += [second.handle(ev, at) for at, ev in stream[6:]]
    assert got == want and second.report() == whole.report()
    assert json.loads(snap)["schema"] == "runbook-session-snapshot/v1"


def test_a_snapshot_is_refused_for_other_bytes_or_when_edited(policy: rp.Policy) -> None:
    data = (EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes()
    s = policy.session(data)
    s.handle_line((EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()[0])
    snap = s.snapshot()
    with pytest.raises(rp.SnapshotRefused) as e:
        rp.Session.restore(policy, data + b"\n# changed\n", snap)
    assert e.value.code == "snapshot-refused" and e.value.reason and e.value.reason in str(e.value)
    edited = json.loads(snap)
    edited["schema"] = "runbook-session-snapshot/v0"
    with pytest.raises(rp.SnapshotRefused, match="/schema"):
        rp.Session.restore(policy, data, json.dumps(edited))
    with pytest.raises(rp.SnapshotRefused):
        rp.Session.restore(policy, data, "not a snapshot")


def test_a_trap_makes_the_session_unusable_and_a_trapped_policy_recovers(policy: rp.Policy) -> None:
    data = (EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes()
    s = policy.session(data)
    s.handle(Start("r", "R2", ["*"], "destructive", rp.COMPLETE, "a"), 0)
    s._inst.fuel = 1_000  # white box: starve the next call (the module's own limits never trap)
    with pytest.raises(rp.ModuleTrap, match="fuel"):
        s.handle(Invoke("Bash", {"command": "kubectl -n payments get pods"}), 1)
    s._inst.fuel = rp.FUEL_PER_CALL
    with pytest.raises(rp.ModuleTrap, match="unusable"):
        s.report()
    assert s.is_over() and s.trapped
    starved = rp.load(fuel=1_000)
    with pytest.raises(rp.ModuleTrap) as e:
        starved.lint(data)
    assert e.value.code == "module-trap"
    with pytest.raises(rp.ModuleTrap):
        starved.session(data)
    # The shared instance is replaced after a trap: the default policy still answers.
    assert policy.lint(data).ok


def test_the_public_wasmtime_path_decides_as_the_fast_one(policy: rp.Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    _, doc, stream, _ = HAND_WRITTEN[4]
    data = (EXAMPLES / doc).read_bytes()
    fast = policy.session(data)
    want = [fast.feed(ev, at, "0" * 64) for at, ev in stream]
    assert fast._inst._exports and all(e.fast for e in fast._inst._exports.values())
    monkeypatch.setattr(_wasm, "fast_path_enabled", False)
    slow = policy.session(data)
    got = [slow.feed(ev, at, "0" * 64) for at, ev in stream]
    assert not any(e.fast for e in slow._inst._exports.values())
    assert got == want and slow.report() == fast.report()


def test_enums_are_their_wire_codes_and_typed_answers_are_typed(policy: rp.Policy) -> None:
    assert rp.DecisionKind.NEEDS_APPROVAL == "needs-approval" and str(rp.DecisionKind.NEEDS_APPROVAL) == "needs-approval"
    assert f"{rp.Deviation.OUT_OF_SCOPE_TOOL}" == "out-of-scope-tool" and rp.Profile("R2") is rp.Profile.R2
    assert json.dumps({"k": rp.Reason.HOST_TRAP}) == '{"k": "host-trap"}'
    s = policy.session((EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes())
    d = s.handle(Start("r", rp.Profile.R0, ["*"], "destructive", rp.Blind(["shell"]), "a"), 0)
    assert d.kind is rp.DecisionKind.HALT and d.reason is rp.Reason.REFUSED
    assert rp.Refusal.COVERAGE_INCOMPLETE in d.refusals and rp.Refusal.PROFILE_TOO_LOW in d.refusals
    st = s.state()
    assert st.phase is rp.Phase.OVER and st.outcome is rp.Outcome.REFUSED


def test_bad_typed_events_are_the_callers_errors(policy: rp.Policy) -> None:
    s = policy.session((EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes())
    with pytest.raises(ValueError, match="R0, R1, R2"):
        s.handle(Start("r", "R9", ["*"], "destructive", rp.COMPLETE, "a"), 0)
    with pytest.raises(TypeError, match="COMPLETE or rp.Blind"):
        s.handle(Start("r", "R2", ["*"], "destructive", "complete", "a"), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        rp.Blind([])
    with pytest.raises(ValueError, match="`at`"):
        s.handle(Tick(), -1)
    with pytest.raises(TypeError, match="not an event"):
        s.handle({"type": "tick"}, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chain link"):
        s.feed(Tick(), 0, "abc")
    with pytest.raises(TypeError, match="exact bytes"):
        policy.session("runbook.yaml")  # type: ignore[arg-type]
    # None of these reached the module: the run has not started.
    assert s.state().phase is rp.Phase.NEW


def test_the_adapters_rules_come_from_the_module(policy: rp.Policy) -> None:
    """Which tools a client sees, how a run ends when the client leaves, the exit code and the approval
    ledger are the module's (docs/spec/run.md#approvals-bound-to-a-call, docs/spec/adapters.md#adapter-duties and docs/spec/README.md#architecture), so this package applies them as the CLI does."""
    doc = (EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes()
    s = policy.session(doc)
    s.handle(Start("r-1", rp.Profile.R2, ["*"], rp.Risk.IRREVERSIBLE, rp.COMPLETE, "agent-1"), 0)
    offered = ["mcp__slack__post_message", "Bash", "Write"]
    assert s.visible_tools(offered) == ["Bash"]
    assert s.visible_tools(offered, whole_allowlist=True) == ["mcp__slack__post_message", "Bash"]
    assert s.leaving(1, False) == (rp.EndReason.CLIENT_CLOSED, False)
    assert s.leaving(0, True) == (rp.EndReason.APPROVAL_TIMEOUT, True)
    assert s.leaving(0, False) == (rp.EndReason.NORMAL, True)
    assert (s.exit_code(), s.exit_code(shadow=True)) == (1, 3)
    assert s.state().approval_requests == []
    d = s.handle(Approval("alice", True, step="inspect", request=1), 5)
    assert (d.kind, d.reason) == (rp.DecisionKind.DENY, rp.Reason.NO_PENDING)
    # docs/spec/runbook.md#exact-numbers: 2^53 + 1 has no exact canonical form: the call is denied before it runs.
    line = '{"type":"invoke","at":6,"tool":"Bash","arguments":{"command":"kubectl -n payments get secret payments-db-credentials","n":9007199254740993}}'
    assert json.loads(s.handle_line(line))["reason"] == "inexact-number"


def test_the_module_composes_every_byte_of_a_bundle(policy: rp.Policy) -> None:
    """The 1.2.0 exports a host needs to write a bundle: effects, records, lines, the guard's rule, git counts."""
    doc = (EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes()
    git = json.loads(policy.git_state(0, b" M changed.txt\0R  new.txt\0old.txt\0?? untracked.txt\0"))
    assert git == {"status": "dirty", "staged": 1, "unstaged": 1, "untracked": 1, "total": 3}
    assert policy.git_state(128, b"") == '{"status":"not-a-checkout"}' and policy.git_state(None, b"") == '{"status":"unavailable"}'
    facts = {
        "run_id": "r-1", "at": 1_796_169_600_123, "reference": "/somewhere/runbook.yaml", "trust": "T1", "module_sha256": policy.module_sha256,
        "host": {"name": "runbook-policy-python", "version": "0.1.0"}, "adapter": "library", "git": git,
    }
    effects = policy.bundle_create(doc, facts)
    assert [(e.op, e.path) for e in effects] == [
        (rp.EffectOp.CREATE_DIR, "r-1"), (rp.EffectOp.WRITE, "r-1/runbook.yaml"), (rp.EffectOp.WRITE, "r-1/envelope.json"),
        (rp.EffectOp.WRITE, "r-1/events.ndjson"), (rp.EffectOp.WRITE, "r-1/run.json"), (rp.EffectOp.WRITE, "latest.json"),
        (rp.EffectOp.APPEND, "history.ndjson"),
    ]
    assert effects[1].bytes == doc and effects[2].bytes.decode() == policy.envelope(doc) and policy.bundle_create(doc, json.dumps(facts)) == effects
    manifest = effects[4].bytes.decode()
    m = json.loads(manifest)
    assert m["document"]["reference"] == "runbook.yaml" and m["lifecycle"] == [{"at": "2026-12-02T00:00:00.123Z", "event": "created"}]
    with pytest.raises(ValueError, match="run id"):
        policy.bundle_create(doc, {**facts, "run_id": "../x"})
    with pytest.raises(ValueError, match="`at`"):
        policy.bundle_create(doc, {**facts, "at": "2026-12-02T00:00:00.000Z"})

    s = policy.session(doc)
    rec = s.feed(Start("r-1", "R2", ["*"], "destructive", rp.COMPLETE, "a"), 0, m["chain_h0"])
    assert rec.record_line == policy.record_line(rec.link, rec.event_line, rec.decision_line) and rec.record_line.endswith("}\n")
    admitted = policy.bundle_change(manifest, {"lifecycle": "admitted", "at": 1_796_169_600_200, "start": rec.event_line})
    assert [(e.op, e.path) for e in admitted] == [(rp.EffectOp.WRITE, "r-1/run.json")]
    manifest = admitted[0].bytes.decode()
    assert json.loads(manifest)["adapter"]["coverage"] == "complete"
    hashes = {"runbook.yaml": "0" * 64, "envelope.json": "1" * 64, "events.ndjson": "2" * 64}
    end = policy.bundle_end(manifest, s.report(), {"at": 1_796_169_601_000, "chain_head": rec.link, "hashes": hashes, "latest": effects[5].bytes.decode()})
    assert [e.path for e in end] == ["r-1/report.json", "r-1/run.json", "r-1/receipt.json", "latest.json", "history.ndjson"]
    receipt = end[2].bytes.decode()
    assert policy.canonicalize(receipt) == receipt and json.loads(receipt)["chain_head"] == rec.link
    trapped = policy.bundle_end(manifest, None, {"at": 1_796_169_601_000, "ended_without_report": "host-trap", "latest": None})
    assert [e.path for e in trapped] == ["r-1/run.json", "history.ndjson"] and json.loads(trapped[0].bytes)["ended_without_report"] == "host-trap"
    with pytest.raises(ValueError, match="already ended"):
        policy.bundle_end(trapped[0].bytes.decode(), s.report(), {"at": 0, "chain_head": rec.link, "hashes": hashes})

    assert json.loads(policy.signature_line(3, 2, "a-1", "msg", "sig", "alice", "SHA256:x")) == {
        "seq": 3, "request": 2, "channel_id": "a-1", "message": "msg", "signature": "sig", "principal": "alice", "fingerprint": "SHA256:x"
    }
    assert json.loads(policy.shadow_line(4, "Bash", "f" * 64, "deny"))["forwarded"] is True

    # A traffic.ndjson line (docs/spec/adapters.md#mcp-beyond-tools): digests only, linked as sha256(prev || JCS(the line without link)).
    entry = {"n": 1, "at": 5, "direction": "to-client", "server": "s", "method": "sampling/createMessage", "params": {"q": "secret"}, "error_code": -32601}
    line, link = policy.traffic_line("h0", entry)
    parsed = json.loads(line)
    assert line.endswith("\n") and "secret" not in line and parsed["link"] == link and parsed["answer_sha256"] is None
    unlinked = {k: v for k, v in parsed.items() if k != "link"}
    assert hashlib.sha256(("h0" + json.dumps(unlinked, sort_keys=True, separators=(",", ":"))).encode()).hexdigest() == link
    with pytest.raises(ValueError, match="direction"):
        policy.traffic_line("h0", {**entry, "direction": "sideways"})

    # The guard's rule, and a session that applies it to every typed invoke.
    assert policy.guard_names("Bash", {"command": "cat .runbook/runs/x"}, [".runbook/runs"])
    assert policy.guard_names("Bash", {".runbook/runs": 1}, [".runbook/runs"]) and not policy.guard_names("Bash", {"command": "ls"}, [".runbook/runs"])
    s.set_guard([".runbook/runs"])
    d = s.handle(Invoke("Bash", {"command": "ls .runbook/runs"}), 1)
    assert (d.kind, d.reason) == (rp.DecisionKind.DENY, rp.Reason.GUARDED)
    s.set_guard([])
    assert s.handle(Invoke("Bash", {"command": "kubectl -n payments get secret payments-db-credentials"}), 2).allowed
