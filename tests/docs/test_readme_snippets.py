"""Every ```python block of README.md runs as written (issue 19, item 4): no undefined
names, no files left in the way of a rerun (blocks that keep a ledger run twice)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def run_block(code: str, where: str, request) -> None:
    """Run ``code`` in a namespace of its own; blocks that read UCI Adult need the files."""
    if "load_adult" in code:
        request.getfixturevalue("adult_available")
    if "import torch" in code:
        pytest.importorskip("torch")
    exec(compile(code, where, "exec"), {"__name__": "__snippet__"})  # noqa: S102


BLOCKS = python_blocks(ROOT / "README.md")


def test_the_readme_has_its_examples():
    assert len(BLOCKS) >= 7


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{n}" for n, _ in BLOCKS])
def test_readme_block_runs_and_reruns(line, code, request, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # anything a block writes to the working folder lands here
    # a block that keeps files (a ledger) runs twice: a rerun must not trip over the first
    for _ in range(2 if "sqlite" in code else 1):
        run_block(code, f"README.md:{line}", request)
