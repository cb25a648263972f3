"""The code people read runs as written (issue 19, items 4 and 5).

* Every ```python block of README.md: no undefined names, no files left in the way of a
  rerun (blocks that keep a ledger run twice).
* Every page of the documentation site (docs/): its blocks in order, in one namespace, as
  a reader pastes them; and every tutorial is in the site's navigation.
* An official example shows no warning: a reader copies what it does, so an example that reads
  the label set from the data, fails to converge or trips a library's warning teaches that.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


@contextmanager
def no_warnings(where: str):
    """Fails naming every warning (category and text) the code under it raised."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    shown = [f"{w.category.__name__}: {w.message}" for w in seen
             if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
    assert shown == [], f"{where} warns: {shown}"


def run_block(code: str, where: str, request) -> None:
    """Run ``code`` in a namespace of its own; blocks that read UCI Adult need the files."""
    if "load_adult" in code:
        request.getfixturevalue("adult_available")
    if "import torch" in code:
        pytest.importorskip("torch")
    with no_warnings(where):
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


PAGES = sorted(p for p in DOCS.rglob("*.md") if python_blocks(p))


def test_every_area_has_a_tutorial():
    names = {p.stem for p in (DOCS / "tutorials").glob("*.md")}
    assert names >= {"dp-statistics", "dp-sgd", "federated-learning", "hybrid", "mpc",
                     "anonymization", "audits", "models", "homomorphic-encryption", "deployment"}
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(f"tutorials/{name}.md" in nav for name in names)


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_code_runs(page, request, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__tutorial__"}
    for line, code in python_blocks(page):
        if "import torch" in code:
            pytest.importorskip("torch")
        if "load_adult" in code:
            request.getfixturevalue("adult_available")
        with no_warnings(f"{page.name}:{line}"):
            exec(compile(code, f"{page.name}:{line}", "exec"), namespace)  # noqa: S102
