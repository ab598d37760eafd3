"""The README's ten-line example runs as written, and its bundle verifies."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

from .conftest import EXAMPLES, verify

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_ten_line_example_runs_and_its_bundle_verifies(cli: Path, workdir: Path) -> None:
    example = python_blocks()[0]
    assert "rp.load()" in example and len([l for l in example.splitlines() if l.strip()]) <= 12
    # Run "from the repository root": the example names an example document by its path there.
    (workdir / "examples" / "rotate-credentials").mkdir(parents=True)
    shutil.copy(EXAMPLES / "rotate-credentials" / "runbook.yaml", workdir / "examples" / "rotate-credentials")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, str(README), "exec"), {"__name__": "readme"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "P2"
    assert lines[1] == "allow deny out-of-scope-tool"
    run_dir = Path(lines[2])
    assert run_dir.parent == Path(".runbook/runs")
    assert verify(cli, run_dir)["outcome"] == "incomplete"


# The book's Python chapter (docs/python.md, where the root README's "Use from Python" section moved).
CHAPTER = README.parent.parent.parent / "docs" / "python.md"


def test_the_books_python_chapter_shows_this_very_example() -> None:
    """The book's Python chapter shows the block this file runs, first, not a copy that drifts."""
    shown = re.findall(r"```python\n(.*?)```", CHAPTER.read_text(encoding="utf-8"), flags=re.S)
    assert shown and shown[0] == python_blocks()[0]


def test_each_frameworks_example_is_shown_as_its_test_runs_it() -> None:
    """Every file of examples/ (each run by its adapter's test) appears verbatim in the package README and in
    the book's Python chapter: what a user copies is what the tests run."""
    examples = sorted((README.parent / "examples").glob("*.py"))
    assert [p.name for p in examples] == ["google_adk.py", "langgraph_agent.py", "openai_agents.py"]
    chapter = CHAPTER.read_text(encoding="utf-8")
    ours = python_blocks()
    for p in examples:
        text = p.read_text(encoding="utf-8")
        assert text in ours, f"packages/python/README.md does not show {p.name} as it is"
        assert f"```python\n{text}```" in chapter, f"docs/python.md does not show {p.name} as it is"
