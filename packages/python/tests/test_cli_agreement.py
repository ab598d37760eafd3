"""lint, envelope, call_sha256, canonicalize and explain agree with the CLI, byte for byte."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import List

import pytest

import runbook_policy as rp

from .conftest import EXAMPLES, RUNBOOKS, replay, run_cli

EDGE_DOCS = {
    "not-utf8.yaml": b"runbook_id: x\nversion: 1\ntitle: \xff\xfe\n",
    "empty.yaml": b"",
    "array.json": b"[1, 2, 3]",
    "bom.json": b'\xef\xbb\xbf{"runbook_id": "x"}',
}


def documents(tmp: Path) -> List[Path]:
    docs = sorted(EXAMPLES.glob("*/runbook.*")) + sorted(RUNBOOKS.glob("*.yaml"))
    for name, data in EDGE_DOCS.items():
        (tmp / name).write_bytes(data)
        docs.append(tmp / name)
    return docs


def test_lint_is_the_clis(policy: rp.Policy, cli: Path, tmp_path: Path) -> None:
    for doc in documents(tmp_path):
        expected = json.loads(run_cli(cli, "lint", "--format", "json", str(doc)).stdout)
        got = policy.lint(doc.read_bytes())
        assert got.sha256 == expected["sha256"] == hashlib.sha256(doc.read_bytes()).hexdigest(), doc
        assert (got.structure.value if got.structure else None) == expected["structure"], doc
        assert got.ok == expected["ok"], doc
        assert [f.to_json() for f in got.findings] == expected["findings"], doc
        assert all(isinstance(f.severity, rp.Severity) for f in got.findings)
    broken = policy.lint((EXAMPLES / "broken" / "runbook.yaml").read_bytes())
    assert not broken.ok and any(f.code == "unknown-field" and f.severity == "error" for f in broken.findings)


def test_envelope_is_the_clis_or_raises_its_findings(policy: rp.Policy, cli: Path, tmp_path: Path) -> None:
    seen_invalid = 0
    for doc in documents(tmp_path):
        p = run_cli(cli, "envelope", "--format", "json", str(doc))
        if p.returncode == 0:
            assert policy.envelope(doc.read_bytes()).encode("utf-8") == p.stdout, doc
        else:
            with pytest.raises(rp.InvalidDocument) as e:
                policy.envelope(doc.read_bytes())
            assert [f.to_json() for f in e.value.findings] == json.loads(p.stdout)["findings"], doc
            assert e.value.code == "invalid-document" and e.value.findings
            seen_invalid += 1
    assert seen_invalid >= 3


def test_call_sha256_is_the_hash_the_cli_accepts_for_a_bound_approval(policy: rp.Policy, cli: Path, tmp_path: Path) -> None:
    args = {"command": "vault write -f database/rotate-role/payments-app"}
    sha = policy.call_sha256("Bash", args)
    # The example stream's call-bound approval names this very hash (examples/README.md).
    assert f'"call_sha256":"{sha}"' in (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text()
    # docs/spec/run.md#approvals-bound-to-a-call: the hex SHA-256 of canonical {"arguments":..,"tool":..}.
    canon = policy.canonicalize(json.dumps({"tool": "Bash", "arguments": args}))
    assert canon == '{"arguments":{"command":"vault write -f database/rotate-role/payments-app"},"tool":"Bash"}'
    assert hashlib.sha256(canon.encode()).hexdigest() == sha
    # Key order and whitespace do not change it; the arguments do.
    assert policy.call_sha256("Bash", dict(reversed(list({**args, "x": 1}.items())))) == policy.call_sha256("Bash", {**args, "x": 1})
    assert policy.call_sha256("Bash", {"command": "vault write -f database/rotate-role/other"}) != sha
    # The CLI admits the gated call with an approval bound to our hash, and not with another's.
    doc = EXAMPLES / "rotate-credentials" / "runbook.yaml"
    lines = (EXAMPLES / "rotate-credentials" / "events.ndjson").read_text().splitlines()
    for bound, expected in ((sha, "allow"), (policy.call_sha256("Bash", {"command": "vault write -f x"}), "needs-approval")):
        stream = tmp_path / f"{expected}.ndjson"
        stream.write_text("\n".join(l.replace("37404f36c47c7a5a69240928a9b8813e51fc4fb24009aedf28ee69223cde5781", bound) for l in lines) + "\n")
        decisions, _ = replay(cli, doc, stream)
        assert json.loads(decisions[7])["decision"] == expected  # the retried rotation, after the approval


def test_call_sha256_refuses_what_is_not_json(policy: rp.Policy) -> None:
    with pytest.raises(TypeError, match="not JSON"):
        policy.call_sha256("Bash", {"x": {1, 2}})
    with pytest.raises(ValueError, match="not JSON"):
        policy.call_sha256("Bash", {"x": float("nan")})
    with pytest.raises(TypeError, match="keys are strings"):
        policy.call_sha256("Bash", {1: "a"})


def test_canonicalize_is_rfc8785(policy: rp.Policy) -> None:
    assert policy.canonicalize('{"b": [1.0, 2e1, "\\u00e9"], "a": null}') == '{"a":null,"b":[1,20,"é"]}'
    with pytest.raises(ValueError):
        policy.canonicalize("{not json")


def test_explain_is_the_sentence_the_cli_prints(policy: rp.Policy, cli: Path) -> None:
    doc = EXAMPLES / "rotate-credentials" / "runbook.yaml"
    out = run_cli(cli, "replay", "--format", "text", str(doc), str(EXAMPLES / "rotate-credentials" / "events-deviations.ndjson")).stdout.decode()
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    for kind, code, shown in [
        ("deviation", "undeclared-tool", "DENIED [undeclared-tool]: "),
        ("deviation", "out-of-scope-tool", "DENIED [out-of-scope-tool]: "),
        ("reason", "not-current", "DENIED [not-current]: "),
        ("reason", "self-approval", "DENIED [self-approval]: "),
        ("reason", "assert-failed", "ASSERT FAILED: "),
        ("outcome", "completed", "completed at terminal `rotated`: "),
    ]:
        sentence = policy.explain(kind, code)
        assert sentence, (kind, code)
        assert shown + sentence in out, (kind, code, sentence)
    assert policy.explain("reason", "no-such-code") is None
    assert policy.explain("refusal", rp.Refusal.COVERAGE_INCOMPLETE) is not None


def test_prose_is_never_a_decision_input_but_is_there(policy: rp.Policy) -> None:
    prose = json.loads(policy.prose((EXAMPLES / "rotate-credentials" / "runbook.yaml").read_bytes()) or "null")
    assert prose["runbook"]["title"] == "Rotate the payments database credential"
    assert "rotate" in prose["steps"]
    assert policy.prose(b"[") is None
