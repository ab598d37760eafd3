"""Shared fixtures: the policy, the CLI (``$RUNBOOK_HOST``, else ``<repo>/target/release/runbook-host``), a
clean working directory for run bundles, and helpers that hold a bundle to ``runbook-host verify``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest

import runbook_policy as rp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
EXAMPLES = REPO / "examples"
RUNBOOKS = HERE / "runbooks"


def cli_path() -> Path:
    env = os.environ.get("RUNBOOK_HOST")
    return Path(env) if env else REPO / "target" / "release" / "runbook-host"


@pytest.fixture(scope="session")
def cli() -> Path:
    p = cli_path()
    assert p.is_file() and os.access(p, os.X_OK), (
        f"no runbook-host CLI at {p}: set RUNBOOK_HOST to a built runbook-host (or build target/release/runbook-host)"
    )
    return p


def run_cli(cli: Path, *args: str, cwd: Path | None = None, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args], capture_output=True, cwd=cwd, input=input, timeout=120)


@pytest.fixture(scope="session")
def policy() -> rp.Policy:
    return rp.load()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory (not a git checkout): bundles go to its .runbook/runs."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def verify(cli: Path, run_dir: Path) -> dict:
    """``runbook-host verify --format json``: asserts exit 0 and returns the result."""
    p = run_cli(cli, "verify", "--format", "json", str(run_dir))
    assert p.returncode == 0, f"verify {run_dir} exited {p.returncode}:\n{p.stdout.decode()}\n{p.stderr.decode()}"
    out = json.loads(p.stdout)
    assert out["ok"] is True and out["replayed"] is True, out
    return out


def verify_fails(cli: Path, run_dir: Path) -> dict:
    p = run_cli(cli, "verify", "--format", "json", str(run_dir))
    assert p.returncode == 1, f"verify {run_dir} exited {p.returncode}, expected 1:\n{p.stdout.decode()}\n{p.stderr.decode()}"
    out = json.loads(p.stdout)
    assert out["ok"] is False
    return out


def replay(cli: Path, doc: Path, events: Path) -> Tuple[List[str], str]:
    """``runbook-host replay --format json``: the decision lines and the report line."""
    p = run_cli(cli, "replay", "--format", "json", str(doc), str(events))
    assert p.returncode in (0, 1), p.stderr.decode()
    lines = p.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "", "the CLI's output ends with a newline"
    return lines[:-2], lines[-2]


def example_streams() -> List[Tuple[Path, Path]]:
    out = []
    for ev in sorted(EXAMPLES.glob("*/events*.ndjson")):
        docs = sorted(ev.parent.glob("runbook.*"))
        out.append((docs[0], ev))
    return out
