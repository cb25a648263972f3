"""The code people read runs as written (issue 19, items 4 and 5).

* Every ```python block of README.md: no undefined names, no files left in the way of a
  rerun (blocks that keep a ledger run twice).
* Every page of the documentation site (docs/): its blocks in order, in one namespace, as
  a reader pastes them; and every tutorial is in the site's navigation.
* An official example shows no warning: a reader copies what it does, so an example that reads
  the label set from the data, fails to converge or trips a library's warning teaches that.
* No code shown reads a range or a category set from the records it works on (issue 32): a
  scale, a clipping bound, a hierarchy or a schema fitted to the data leaks it outside any
  budget, and a reader copies it. The records are what a data loader returns and what is
  cut, scaled or cast from them; a ``min``, ``max``, ``unique``, ``value_counts``,
  ``quantile`` (method, NumPy's or the builtin's) or ``set`` of them is refused. A model's,
  a release's or a ciphertext's output is no longer the records.
* A page shows what its code prints (issue 32): a ```python block followed by a paragraph
  ``Expected output:`` and a ```text block must print that text. Words are compared exactly
  (runs of spaces collapsed: a table's padding follows its numbers' widths); each number
  within one unit of its last printed digit (deterministic code: only a platform's floating
  point may move it), or within the ``(numbers within ±TOL)`` the paragraph states, for
  output that depends on fresh secure noise (the page then tells the reader how far theirs
  may differ).
"""

from __future__ import annotations

import ast
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
                     "audits", "synthetic-data",
                     "models", "mpc"}
    assert shown >= {"dp-sgd", "federated-learning"}


# calls that return data: the records themselves ...
DATA_SOURCES = {"load_adult", "load_breast_cancer", "load_diabetes", "load_digits", "load_fate",
                "load_iris", "load_nursery", "load_sklearn", "load_wine", "load_xy",
                "synthetic_census", "read_csv", "read_parquet"}
# ... or still the records (a part of them, scaled, cast, split, stacked)
DATA_KEEPING = {"scale", "astype", "copy", "to_numpy", "reshape", "ravel", "flatten", "drop",
                "dropna", "fillna", "train_test_split", "coin_split", "concatenate", "vstack",
                "hstack", "column_stack", "asarray", "array", "DataFrame", "Series"}
# what reads a range or a category set
RANGE_READS = {"min", "max", "amin", "amax", "nanmin", "nanmax", "ptp", "unique", "nunique",
               "value_counts", "quantile", "percentile", "nanquantile", "nanpercentile",
               "drop_duplicates", "get_dummies", "factorize"}
# steps that learn a range or a category set from whatever they are given (unless told the
# categories): refused wherever they appear
LEARNED_RANGES = {"StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler",
                  "QuantileTransformer", "KBinsDiscretizer", "OneHotEncoder", "OrdinalEncoder",
                  "LabelEncoder", "LabelBinarizer", "Categorical"}
ARRAY_MODULES = {"np", "numpy", "pd", "pandas", "torch"}


def _name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def range_reads(code: str) -> list[str]:
    """Each place where ``code`` reads a range or a category set from its records (module
    docstring), as ``line: expression``."""
    tree = ast.parse(code)
    data: set[str] = set()

    def is_data(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in data
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in DATA_SOURCES:
                return True
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            return name in DATA_KEEPING and any(
                is_data(a) for a in [receiver, *node.args] if a is not None)
        if isinstance(node, (ast.Lambda, ast.FunctionDef)):
            return False
        return any(is_data(child) for child in ast.iter_child_nodes(node))

    for _ in range(3):                     # to a fixed point: a loop may use a later name
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
            elif isinstance(node, (ast.For, ast.comprehension)):
                targets, value = [node.target], node.iter
            else:
                continue
            if value is not None and is_data(value):
                data |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, func = _name(node.func), node.func
        if isinstance(func, ast.Attribute) and name in RANGE_READS:
            module = isinstance(func.value, ast.Name) and func.value.id in ARRAY_MODULES
            read = (is_data(node.args[0]) if module and node.args else
                    not module and is_data(func.value))
        elif name in LEARNED_RANGES:
            read = all(k.arg != "categories" for k in node.keywords)
        else:
            read = (isinstance(func, ast.Name) and name in ("min", "max", "set")
                    and len(node.args) == 1 and is_data(node.args[0]))
        if read:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def page_code(path: Path) -> str:
    """A page's ```python blocks as one program, each at its line of the page."""
    code = ""
    for line, block in python_blocks(path):
        code += "\n" * (line - 1 - code.count("\n")) + block
    return code


SHOWN = ([(p.relative_to(ROOT).as_posix(), page_code(p)) for p in [ROOT / "README.md", *PAGES]]
         + [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))
            for p in sorted((ROOT / "examples").glob("*.py"))])


@pytest.mark.parametrize("where, code", SHOWN, ids=[w for w, _ in SHOWN])
def test_no_code_shown_reads_ranges_or_categories_from_its_data(where, code):
    assert range_reads(code) == [], f"{where} reads from its records what must be declared"


@pytest.mark.parametrize("code, reads", [
    ("X, y = load_breast_cancer(return_X_y=True)\nlo = X.min(0)", ["2: X.min(0)"]),
    ("X, y = load_breast_cancer(return_X_y=True)\n"
     "a, b, c, d = train_test_split(X, y)\nhi = np.max(a, axis=0)", ["3: np.max(a, axis=0)"]),
    ("people = synthetic_census(9)\nh = Hierarchy.masking(people['zip'].astype(str).unique())",
     ["2: people['zip'].astype(str).unique()"]),
    ("data = load_xy('wine')\nclasses = sorted(set(data.y))", ["2: set(data.y)"]),
    ("data = load_xy('wine')\nfor rows in [data.X[:5]]:\n    print(rows.max())",
     ["3: rows.max()"]),
    ("X = StandardScaler().fit_transform(X)", ["1: StandardScaler()"]),
    ("df = read_csv('a.csv')\nX = pd.get_dummies(df)", ["2: pd.get_dummies(df)"]),
    # declared bounds, a model's output and the builtin max of two numbers are fine
    ("X, y = load_breast_cancer(return_X_y=True)\nX = public_bounds('bc').scale(X)\n"
     "model = LogisticRegression().fit(X, y)\nprint(abs(model.coef_).max(), "
     "max(y.mean(), 1 - y.mean()))", []),
    ("h = load_adult_hierarchies()\nages = sorted({int(v) for v in h['age'][0]})", []),
    ("people = synthetic_census(9)\nstats.quantile(people['income'], 0.5, bounds=(0, 9))", []),
    ("encoder = OneHotEncoder(categories=[['a', 'b']])", []),
])
def test_range_reads_finds_what_is_read_from_the_records(code, reads):
    assert range_reads(code) == reads


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
