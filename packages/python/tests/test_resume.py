"""Run.resume: a run carried on by another process, by the module's replay of its bundle (as the Rust host's
Run::resume); Session.replay_events; evidence that does not check out, and finished runs, refused."""

from __future__ import annotations

import gc
import hashlib
import json
from pathlib import Path
from typing import Any, Collection, Dict, List, Optional

import pytest

import runbook_policy as rp

from .conftest import EXAMPLES, verify
from .test_run import ROTATE, ROTATE_CLAIM, ManualClock, feed_stream, fixed_run, recorded, tree

BASE = 1_796_169_600_000
LINES = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()


def run_with_resumes(policy: rp.Policy, runs: Path, resume_before: Collection[int], keep_t0: bool = False, stop: Optional[int] = None) -> Optional[rp.Run]:
    """fixed_run's stream, the Run dropped (a process that exits without ending it) and resumed before each
    event of ``resume_before`` (1-based: the start is 0); with ``stop``, dropped for good before that event."""
    clock = ManualClock(BASE)
    run = rp.Run.create(policy, ROTATE, runs_root=runs, run_id="r-fixed", clock=clock, git={"status": "not-a-checkout"}, **ROTATE_CLAIM)
    pin, t0 = run.pin, run.t0
    for i, line in enumerate(LINES[1:], 1):
        e = json.loads(line)
        clock.ms = BASE + e["at"]
        if i == stop:
            return None
        if i in resume_before:
            del run
            gc.collect()
            run = rp.Run.resume(policy, "r-fixed", runs_root=runs, pin=pin, clock=clock, t0=t0 if keep_t0 else None)
            assert run.state().events == i and run.t0 == t0
        if e["type"] == "end":
            run.end(e["reason"])
        else:
            feed_stream(run, [LINES[0], line])
    return run


@pytest.mark.parametrize(
    "resume_before,keep_t0",
    [({6}, False), ({7, 16}, True), (set(range(1, len(LINES))), False)],
    ids=["once-before-the-gated-call", "before-the-approval-and-the-end", "before-every-event"],
)
def test_a_resumed_run_writes_the_single_runs_bundle_byte_for_byte(policy: rp.Policy, cli: Path, workdir: Path, resume_before: set, keep_t0: bool) -> None:
    one = fixed_run(policy, workdir / "one")
    split = run_with_resumes(policy, workdir / "split", resume_before, keep_t0)
    assert split is not None and split.finished and split.state().outcome is rp.Outcome.COMPLETED
    assert tree(workdir / "split") == tree(workdir / "one")
    verify(cli, split.dir)
    assert verify(cli, one.dir)["outcome"] == "completed"


def test_replay_events_is_the_modules_check_of_every_record(policy: rp.Policy, workdir: Path) -> None:
    run_with_resumes(policy, workdir, (), stop=9)
    run_dir = workdir / "r-fixed"
    data = (run_dir / "events.ndjson").read_bytes()
    h0 = json.loads((run_dir / "run.json").read_text())["chain_h0"]
    r = policy.session(ROTATE.read_bytes()).replay_events(data, h0)
    assert r == rp.Replayed(head=recorded(run_dir)[-1][0], events=9, last_at=json.loads(LINES[8])["at"])
    assert policy.session(ROTATE.read_bytes()).replay_events(b"", h0) == rp.Replayed(h0, 0, 0)
    with pytest.raises(rp.RunTampered) as e:
        policy.session(ROTATE.read_bytes()).replay_events(data[:-1], h0)  # the last record cut short
    assert e.value.place == "events.ndjson:9" and e.value.code == "run-tampered" and str(e.value).startswith("events.ndjson:9: ")


def relinked(policy: rp.Policy, h0: str, records: List[tuple]) -> bytes:
    """events.ndjson of ``records`` (h, event line, decision line) with every link recomputed from ``h0``."""
    out, prev = [], h0
    for _, ev, d in records:
        prev = policy.chain_link(prev, ev, d)
        out.append(policy.record_line(prev, ev, d))
    return "".join(out).encode()


@pytest.mark.parametrize("how,n", [("decision, chain relinked", 2), ("decision", 4), ("h", 3), ("event", 5)])
def test_an_edited_events_line_is_refused_naming_it(policy: rp.Policy, workdir: Path, how: str, n: int) -> None:
    run_with_resumes(policy, workdir, (), stop=7)
    run_dir = workdir / "r-fixed"
    h0 = json.loads((run_dir / "run.json").read_text())["chain_h0"]
    records = recorded(run_dir)
    lines = (run_dir / "events.ndjson").read_text().splitlines(keepends=True)
    h, ev, d = records[n - 1]
    if how == "decision, chain relinked":
        records[n - 1] = (h, ev, d.replace('"decision":"allow"', '"decision":"deny"'))
        data = relinked(policy, h0, records)
    else:
        old, new = {"decision": ('"decision":"allow"', '"decision":"deny"'), "h": (h, "0" * 64), "event": ('"age_days":97', '"age_days":9')}[how]
        assert old in lines[n - 1]
        lines[n - 1] = lines[n - 1].replace(old, new, 1)
        data = "".join(lines).encode()
    (run_dir / "events.ndjson").write_bytes(data)
    before = tree(workdir)
    with pytest.raises(rp.RunTampered) as e:
        rp.Run.resume(policy, "r-fixed", runs_root=workdir)
    assert e.value.place == f"events.ndjson:{n}" and f"run r-fixed: events.ndjson:{n}: " in str(e.value), str(e.value)
    assert tree(workdir) == before, "a refused resume writes nothing"


def swap_document(policy: rp.Policy, run_dir: Path, doc: bytes, relink: bool) -> None:
    """Puts ``doc`` in the bundle with run.json (document sha256, chain_h0) edited to match, and with
    ``relink`` every link of events.ndjson recomputed from the new h0: all a forger can do."""
    m: Dict[str, Any] = json.loads((run_dir / "run.json").read_text())
    envelope = policy.envelope(doc)
    h0 = hashlib.sha256(envelope.encode()).hexdigest()
    m["document"]["sha256"], m["chain_h0"], m["envelope_sha256"] = hashlib.sha256(doc).hexdigest(), h0, h0
    (run_dir / "runbook.yaml").write_bytes(doc)
    (run_dir / "envelope.json").write_text(envelope)
    (run_dir / "run.json").write_text(json.dumps(m, indent=2))
    if relink:
        (run_dir / "events.ndjson").write_bytes(relinked(policy, h0, recorded(run_dir)))


def test_a_swapped_document_is_refused_by_the_pin_or_the_chain(policy: rp.Policy, workdir: Path) -> None:
    run = rp.Run.create(policy, ROTATE, runs_root=workdir, run_id="r-swap", git={"status": "not-a-checkout"}, **ROTATE_CLAIM)
    assert run.invoke("Bash", {"command": "kubectl -n payments get secret payments-db-credentials"}).allowed
    pin, run_dir = run.pin, run.dir
    assert pin == (hashlib.sha256(ROTATE.read_bytes()).hexdigest(), json.loads((run_dir / "run.json").read_text())["chain_h0"])
    del run
    gc.collect()
    # A document that decides these events alike (one more comment), the chain relinked: only the pin tells.
    swap_document(policy, run_dir, ROTATE.read_bytes() + b"# and a comment\n", relink=True)
    with pytest.raises(rp.RunTampered) as e:
        rp.Run.resume(policy, "r-swap", runs_root=workdir, pin=pin)
    assert e.value.place == "runbook.yaml" and "pinned" in e.value.reason
    rp.Run.resume(policy, "r-swap", runs_root=workdir)  # without the pin nothing in the bundle says otherwise
    # Another runbook, the chain not relinked: its first link no longer follows from h0.
    swap_document(policy, run_dir, (EXAMPLES / "read-only-investigation" / "runbook.yaml").read_bytes(), relink=False)
    with pytest.raises(rp.RunTampered) as e:
        rp.Run.resume(policy, "r-swap", runs_root=workdir, pin=pin)
    assert e.value.place == "runbook.yaml"
    with pytest.raises(rp.RunTampered, match=r"run r-swap: events\.ndjson:1: "):
        rp.Run.resume(policy, "r-swap", runs_root=workdir)
    # run.json's own claims are checked against the document: its sha256, and h0 derived from it.
    m = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**m, "chain_h0": "0" * 64}))
    with pytest.raises(rp.RunTampered) as e:
        rp.Run.resume(policy, "r-swap", runs_root=workdir)
    assert e.value.place == "run.json" and "chain_h0" in e.value.reason
    (run_dir / "run.json").write_text(json.dumps({**m, "document": {**m["document"], "sha256": "0" * 64}}))
    with pytest.raises(rp.RunTampered) as e:
        rp.Run.resume(policy, "r-swap", runs_root=workdir)
    assert e.value.place == "runbook.yaml" and "sha256" in e.value.reason


def test_a_finished_run_is_not_resumed_nor_one_that_is_not_there(policy: rp.Policy, workdir: Path) -> None:
    ended = rp.Run.create(policy, ROTATE, run_id="r-ended", **ROTATE_CLAIM)
    ended.end()
    refused = rp.Run.create(policy, ROTATE, run_id="r-refused", **{**ROTATE_CLAIM, "coverage": rp.Blind(["shell"])})
    assert refused.finished and not refused.start.allowed
    for run_id in ("r-ended", "r-refused"):
        with pytest.raises(rp.PolicyError, match=f"run {run_id} is finished") as e:
            rp.Run.resume(policy, run_id)
        assert not isinstance(e.value, (rp.RunTampered, rp.RunBroken))
    open_run = rp.Run.create(policy, ROTATE, run_id="r-signed", **ROTATE_CLAIM)
    m = json.loads((open_run.dir / "run.json").read_text())
    (open_run.dir / "run.json").write_text(json.dumps({**m, "approvals": {"signed": True, "allowed_signers_sha256": "0" * 64}}))
    with pytest.raises(rp.PolicyError, match="signed approvals"):
        rp.Run.resume(policy, "r-signed")  # this package checks no signature: it does not carry such a run on
    with pytest.raises(rp.RunBroken, match="r-absent cannot be resumed"):
        rp.Run.resume(policy, "r-absent")
    with pytest.raises(ValueError, match="usable run id"):
        rp.Run.resume(policy, "../r-ended")
    with pytest.raises(TypeError, match="pin"):
        rp.Run.resume(policy, "r-ended", pin="0" * 64)  # type: ignore[arg-type]
