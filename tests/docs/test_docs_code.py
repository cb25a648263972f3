"""The code people read runs as written (issue 19, items 4 and 5).

* Every ```python block of README.md: no undefined names, no files left in the way of a
  rerun (blocks that keep a ledger run twice).
* Every page of the documentation site (docs/): its blocks in order, in one namespace, as
  a reader pastes them; and every tutorial is in the site's navigation.
* An official example shows no warning: a reader copies what it does, so an example that reads
  the label set from the data, fails to converge or trips a library's warning teaches that.
* A page shows what its code prints (issue 32): a ```python block followed by a paragraph
  ``Expected output:`` and a ```text block must print that text. Words are compared exactly
  (runs of spaces collapsed: a table's padding follows its numbers' widths); each number
  within one unit of its last printed digit (deterministic code: only a platform's floating
  point may move it), or within the ``(numbers within ±TOL)`` the paragraph states, for
  output that depends on fresh secure noise (the page then tells the reader how far theirs
  may differ).
"""

from __future__ import annotations

import io
import re
import warnings
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```\n(?:\s*^Expected output(?: \(numbers "
                   r"within ±(?P<tol>[0-9.]+)\))?:\n\s*^```text\n(?P<out>.*?)^```)?",
                   re.S | re.M)
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block of a Markdown file."""
    return [(line, code) for line, code, _ in documented_blocks(path)]


def documented_blocks(path: Path) -> list[tuple[int, str, tuple[str, float | None] | None]]:
    """(line number, code, (expected output, stated tolerance) or None) of each ```python
    block of a Markdown file (module docstring)."""
    text = path.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 2, m.group("code"),
             None if m.group("out") is None else
             (m.group("out"), None if m.group("tol") is None else float(m.group("tol"))))
            for m in BLOCK.finditer(text)]


def output_differences(printed: str, expected: str, tolerance: float | None) -> list[str]:
    """How ``printed`` differs from ``expected`` (module docstring); [] when it matches."""
    def split(text: str) -> tuple[list[str], list[str]]:
        words = [" ".join(w.split()) for w in NUMBER.split(text)]
        return words, NUMBER.findall(text)

    (words, numbers), (want_words, want_numbers) = split(printed), split(expected)
    if words != want_words or len(numbers) != len(want_numbers):
        return [f"printed:\n{printed}\nexpected:\n{expected}"]
    wrong = []
    for got, want in zip(numbers, want_numbers):
        mantissa = want.lower().partition("e")[0]
        digits = len(mantissa.partition(".")[2])
        unit = 10.0 ** (int(want.lower().partition("e")[2] or 0) - digits)
        allowed = max(unit, 1e-9 * abs(float(want)), tolerance or 0.0)
        if abs(float(got) - float(want)) > allowed * (1 + 1e-9):
            wrong.append(f"{got} where the page shows {want} (within ±{allowed:g})")
    return wrong


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
def test_page_code_runs_and_prints_what_the_page_shows(page, request, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__tutorial__"}
    for line, code, expected in documented_blocks(page):
        if "import torch" in code:
            pytest.importorskip("torch")
        if "load_adult" in code:
            request.getfixturevalue("adult_available")
        printed = io.StringIO()
        with no_warnings(f"{page.name}:{line}"), redirect_stdout(printed):
            exec(compile(code, f"{page.name}:{line}", "exec"), namespace)  # noqa: S102
        if expected is not None:
            wrong = output_differences(printed.getvalue(), *expected)
            assert wrong == [], f"{page.name}:{line} prints {wrong}"


def test_the_tutorials_show_their_output():
    shown = {p.stem for p in PAGES for *_, expected in documented_blocks(p) if expected}
    assert shown >= {"anonymization", "dp-statistics", "homomorphic-encryption", "hybrid",
                     "models", "mpc"}
    assert shown >= {"dp-sgd", "federated-learning"}


@pytest.mark.parametrize("printed, expected, tolerance, ok", [
    ("accuracy 0.912, eps 2.000\n", "accuracy 0.903, eps 2.000\n", 0.03, True),
    ("accuracy 0.812, eps 2.000\n", "accuracy 0.903, eps 2.000\n", 0.03, False),
    ("n  =  12   k 5\n", "n = 12 k 5\n", None, True),         # padding follows the widths
    ("n = 13 k 5\n", "n = 12 k 5\n", None, True),              # one unit of the last digit
    ("n = 14 k 5\n", "n = 12 k 5\n", None, False),
    ("mean 1.5e-03\n", "mean 1.4e-03\n", None, True),
    ("mean 1.5e-02\n", "mean 1.4e-03\n", None, False),
    ("refused: k=5\n", "refused: l=5\n", None, False),         # words are exact
    ("a 1 2\n", "a 1\n", None, False)])
def test_expected_output_comparison(printed, expected, tolerance, ok):
    assert (output_differences(printed, expected, tolerance) == []) is ok
