"""The loader: the bundled component is the CLI's, its sha256 is checked, other bytes are refused."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import pytest

import runbook_policy as rp

from .conftest import run_cli


def bundled_bytes() -> bytes:
    return resources.files("runbook_policy").joinpath("policy.wasm").read_bytes()


def test_the_recorded_sha256_is_the_bundled_bytes_and_the_clis_component(cli: Path, tmp_path: Path) -> None:
    assert hashlib.sha256(bundled_bytes()).hexdigest() == rp.COMPONENT_SHA256
    assert run_cli(cli, "module", "--sha256").stdout.decode().strip() == rp.COMPONENT_SHA256
    assert run_cli(cli, "module", "--out", str(tmp_path / "cli.wasm")).returncode == 0
    assert (tmp_path / "cli.wasm").read_bytes() == bundled_bytes()


def test_load_checks_and_loads_the_bundled_component(policy: rp.Policy) -> None:
    assert policy.module_sha256 == rp.COMPONENT_SHA256
    assert policy.version() == "0.1.0"


def test_load_refuses_bytes_whose_sha256_differs_naming_both_hashes(tmp_path: Path) -> None:
    data = bytearray(bundled_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    bad = tmp_path / "policy.wasm"
    bad.write_bytes(bytes(data))
    actual = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(rp.ComponentMismatch) as e:
        rp.load(bad)
    assert e.value.code == "component-mismatch"
    assert e.value.expected == rp.COMPONENT_SHA256 and e.value.actual == actual
    assert rp.COMPONENT_SHA256 in str(e.value) and actual in str(e.value) and str(bad) in str(e.value)
    assert isinstance(e.value, rp.PolicyError)


def test_load_refuses_the_right_bytes_when_told_to_expect_others(tmp_path: Path) -> None:
    good = tmp_path / "policy.wasm"
    good.write_bytes(bundled_bytes())
    other = "ab" * 32
    with pytest.raises(rp.ComponentMismatch) as e:
        rp.load(good, sha256=other)
    assert other in str(e.value) and rp.COMPONENT_SHA256 in str(e.value)
    # The hash the caller names is what counts (the conformance runner's freshly built component).
    assert rp.load(good, sha256=rp.COMPONENT_SHA256.upper()).module_sha256 == rp.COMPONENT_SHA256


def test_load_refuses_an_unreadable_component_and_a_malformed_hash(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        rp.load(tmp_path / "missing.wasm")
    with pytest.raises(ValueError, match="64 hex digits"):
        rp.load(sha256="not-a-hash")


def test_truncated_bytes_are_refused_before_compiling(tmp_path: Path) -> None:
    short = tmp_path / "short.wasm"
    short.write_bytes(bundled_bytes()[:1000])
    with pytest.raises(rp.ComponentMismatch):
        rp.load(short)


def test_a_policy_is_made_by_load_only() -> None:
    with pytest.raises(TypeError):
        rp.Policy()
    with pytest.raises(TypeError):
        rp.Session()


LOAD_AND_DECIDE = """
import json, sys, runbook_policy as rp
p = rp.load()
s = p.session(open(sys.argv[1], "rb").read())
print(json.loads(s.handle_line(sys.argv[2]))["decision"])
"""
START = '{"type":"start","at":0,"run_id":"c","profile":"R2","allowlist":["*"],"risk_ceiling":"irreversible","coverage":"complete","agent":"a"}'


def test_compiled_code_is_cached_between_processes_and_a_bad_cache_entry_is_compiled_over(tmp_path: Path) -> None:
    import hashlib
    import os
    import subprocess
    import sys

    from .conftest import EXAMPLES

    doc = str(EXAMPLES / "rotate-credentials" / "runbook.yaml")
    env = dict(os.environ, RUNBOOK_POLICY_CACHE=str(tmp_path / "cache"))

    def decide() -> str:
        r = subprocess.run([sys.executable, "-c", LOAD_AND_DECIDE, doc, START], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert decide() == "allow"
    entries = sorted((tmp_path / "cache").iterdir())
    assert [e.name.split(".", 1)[1] for e in entries] == ["cwasm", "cwasm.sha256"], entries
    code, digest = entries
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0, "the cache directory is private to its user"
    assert code.stat().st_mode & 0o777 == 0o600
    pristine = code.read_bytes()
    assert digest.read_text() == hashlib.sha256(pristine).hexdigest()
    assert decide() == "allow"  # from the cache
    code.write_bytes(b"not compiled code")  # a truncated or foreign entry: compiled again, then rewritten
    assert decide() == "allow"
    assert code.read_bytes() == pristine
    # Issue 28, F10: one byte patched in the middle (it would still deserialize): not run, compiled over.
    patched = bytearray(pristine)
    patched[len(patched) // 2] ^= 0xFF
    code.write_bytes(bytes(patched))
    assert decide() == "allow"
    assert code.read_bytes() == pristine
    # A cache directory other users can write is neither read nor written.
    code.write_bytes(bytes(patched))
    digest.write_text(hashlib.sha256(bytes(patched)).hexdigest())
    os.chmod(tmp_path / "cache", 0o777)
    assert decide() == "allow"
    assert code.read_bytes() == bytes(patched), "nothing written to a cache others can write"
    os.chmod(tmp_path / "cache", 0o700)
    env["RUNBOOK_POLICY_CACHE"] = ""  # no cache at all
    assert decide() == "allow"
