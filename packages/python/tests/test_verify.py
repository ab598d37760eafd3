"""``rp.verify`` finds what ``runbook-host verify`` finds: the same checks, the same failure."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import List

import pytest

import runbook_policy as rp

from .conftest import REPO, verify, verify_fails

VECTORS = REPO / "conformance" / "vectors" / "run"


def vector_bundles(refused: bool = False) -> List[Path]:
    """Every run directory of the whole-run vectors' runs roots (found by its run.json); with ``refused``,
    only those of the vectors whose resume was refused (an unended bundle as the agent left it), else only
    the others."""
    def resume_refused(run_dir: Path) -> bool:
        script = json.loads((run_dir.parent.parent / "script.json").read_text(encoding="utf-8"))
        return script.get("expect", {}).get("resume_refused") is True

    return sorted(p.parent for p in VECTORS.glob("*/expected/*/run.json") if resume_refused(p.parent) == refused)


def copy_of(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_every_vector_bundle_verifies_with_the_clis_checks(policy: rp.Policy, cli: Path) -> None:
    bundles = vector_bundles()
    assert len(bundles) >= 30
    for run_dir in bundles:
        expected = verify(cli, run_dir)
        got = rp.verify(run_dir, policy=policy)
        assert got.ok and got.failure is None, (run_dir, got.failure)
        assert got.checks == [c["id"] for c in expected["checks"]], run_dir
        assert (got.run_id, got.outcome, got.events) == (expected["run_id"], expected["outcome"], expected["events"]), run_dir
        assert [{"code": c, "message": m} for c, m in got.reasons] == expected["share_safety"]["reasons"], run_dir
        assert got.warnings == expected["warnings"] and not got.redacted and got.shadow is None and not got.signed_answers


def test_a_bundle_whose_resume_was_refused_fails_as_the_cli_says(policy: rp.Policy, cli: Path) -> None:
    bundles = vector_bundles(refused=True)
    assert len(bundles) >= 2
    for run_dir in bundles:
        expected = verify_fails(cli, run_dir)
        got = rp.verify(run_dir, policy=policy)
        assert not got.ok, run_dir
        assert got.failure == (expected["failure"]["place"], expected["failure"]["message"]), run_dir
        assert got.checks == [c["id"] for c in expected["checks"]], run_dir


def test_an_edited_outcome_fails_where_and_as_the_cli_says(policy: rp.Policy, cli: Path, tmp_path: Path) -> None:
    run_dir = copy_of(next(b for b in vector_bundles() if b.parent.parent.name == "example-rotate-credentials"), tmp_path)
    report = (run_dir / "report.json").read_text()
    assert report.count('"outcome":"completed"') == 1
    (run_dir / "report.json").write_text(report.replace('"outcome":"completed"', '"outcome":"failed"'))
    expected = verify_fails(cli, run_dir)
    got = rp.verify(run_dir, policy=policy)
    assert not got.ok
    assert got.failure == (expected["failure"]["place"], expected["failure"]["message"])
    assert got.checks == [c["id"] for c in expected["checks"]]


def test_a_symlinked_events_file_is_not_read(policy: rp.Policy, cli: Path, tmp_path: Path) -> None:
    run_dir = copy_of(vector_bundles()[0], tmp_path)
    os.replace(run_dir / "events.ndjson", tmp_path / "events.ndjson")
    os.symlink(tmp_path / "events.ndjson", run_dir / "events.ndjson")
    got = rp.verify(run_dir, policy=policy)
    assert got.failure == ("events.ndjson", "not a regular file")
    expected = verify_fails(cli, run_dir)["failure"]
    assert got.failure == (expected["place"], expected["message"])


def test_a_bundle_with_signed_answers_is_not_ok(policy: rp.Policy) -> None:
    signed = [b for b in vector_bundles() if (b / "signatures.ndjson").is_file()]
    if not signed:
        pytest.skip("no whole-run vector holds signatures.ndjson")
    for run_dir in signed:
        got = rp.verify(run_dir, policy=policy)
        assert not got.ok, run_dir


def test_signed_answers_whose_payloads_passed_still_fail_closed(tmp_path: Path) -> None:
    """The package cannot check SSH signature bytes: an answer the module accepted is a failure here."""
    answer = rp.SignedAnswer(place="signatures.ndjson:1", principal="alice", message="m", signature="s", fingerprint="f")

    class Module:
        module_sha256 = "0" * 64

        def verify_bundle(self, entries, module_sha256, signers_sha256=None):  # noqa: ANN001, ANN201
            assert [n for n, _ in entries] == ["a", "d", "z"] and module_sha256 == self.module_sha256 and signers_sha256 is None
            assert entries[0][1] == b"x" and entries[1][1] == 1 and entries[2][1] is None
            return rp.Verification(checks=["layout", "signatures", "receipt"], run_id="r", reasons=[("c", "m")], signed_answers=[answer])

    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "e").write_bytes(b"")
    os.symlink(tmp_path / "a", tmp_path / "z")
    got = rp.verify(tmp_path, policy=Module())  # type: ignore[arg-type]
    assert not got.ok
    assert got.failure == ("signatures.ndjson:1", "the SSH signature is not checked by this package: verify the bundle with runbook-host verify")
    assert got.checks == ["layout"] and got.reasons == [] and got.signed_answers == [answer]


def test_more_than_the_bound_is_refused_unread(policy: rp.Policy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runbook_policy import _verify

    monkeypatch.setattr(_verify, "MAX_BUNDLE_BYTES", 10)
    (tmp_path / "a").write_bytes(b"x" * 6)
    (tmp_path / "b").write_bytes(b"x" * 5)
    got = rp.verify(tmp_path, policy=policy)
    assert got.failure == ("b", "the bundle holds more than 10 bytes, which verify does not read") and got.checks == []


def test_verify_bundle_takes_bytes_a_count_or_none(policy: rp.Policy) -> None:
    v = policy.verify_bundle([("run.json", b"{"), ("pending", 0), ("link", None)], policy.module_sha256)
    assert not v.ok and v.failure[0] == "run.json" and v.checks == []
    with pytest.raises(TypeError, match="the entry 'x'"):
        policy.verify_bundle([("x", "text")], policy.module_sha256)


def test_a_signed_receipt_fails_closed_here_and_the_cli_checks_it(policy: rp.Policy, cli: Path, tmp_path: Path) -> None:
    # This package cannot check the receipt's DSSE signature: a bundle that carries one never passes here,
    # and the CLI, which can, refuses this forged one.
    run_dir = copy_of(vector_bundles()[0], tmp_path)
    (run_dir / "receipt.dsse.json").write_text('{"payloadType":"x","payload":"","signatures":[]}')
    got = rp.verify(run_dir, policy=policy)
    assert got.receipt_signed and not got.ok
    assert got.failure is not None and got.failure[0] == "receipt.dsse.json"
    assert verify_fails(cli, run_dir)["failure"]["place"] in ("receipt.dsse.json", "run.json")
