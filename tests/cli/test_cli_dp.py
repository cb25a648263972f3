"""``veil dp stats`` and ``veil demo``: results, JSON, and clean errors for bad input."""

import json

import numpy as np
import pytest

from veil.cli.main import main


@pytest.fixture
def people(tmp_path):
    path = tmp_path / "people.csv"
    rows = ["age;sex;income"] + [f"{20 + i % 60};{'F' if i % 3 else 'M'};{1000 * (i % 7)}"
                                 for i in range(300)] + ["150;F;0"]
    path.write_text("\n".join(rows) + "\n")
    return path


def error_text(capsys) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(capsys.readouterr().err.split())


def run_json(capsys, *args):
    assert main(["dp", "stats", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_mean_json(people, capsys):
    out = run_json(capsys, str(people), "--column", "age", "--query", "mean",
                   "--bounds", "17,90", "--epsilon", "0.5")
    assert out["query"] == "mean" and out["column"] == "age"
    assert out["epsilon"] == 0.5 and out["delta"] == 0.0
    assert out["clipped"] == 1  # the 150-year-old
    assert 17 <= out["value"] <= 90
    assert out["ledger_spent"]["epsilon"] <= 0.5 + 1e-9


def test_other_queries(people, capsys):
    out = run_json(capsys, str(people), "--column", "age", "--query", "histogram",
                   "--bins", "4", "--bounds", "0,100", "--epsilon", "1")
    assert len(out["value"]) == 4 and out["edges"] == [0.0, 25.0, 50.0, 75.0, 100.0]
    out = run_json(capsys, str(people), "--column", "sex", "--query", "histogram",
                   "--categories", "F,M", "--epsilon", "1")
    assert set(out["value"]) == {"F", "M"}
    out = run_json(capsys, str(people), "--column", "income", "--query", "quantile",
                   "--q", "0.5", "--bounds", "0,10000", "--epsilon", "1")
    assert 0 <= out["value"] <= 10000
    out = run_json(capsys, str(people), "--column", "age", "--query", "variance",
                   "--bounds", "17,90", "--epsilon", "1", "--delta", "1e-6")
    assert out["delta"] == 1e-6 and "Gaussian" in out["mechanism"]
    out = run_json(capsys, str(people), "--column", "sex", "--query", "count", "--epsilon", "1")
    assert isinstance(out["value"], int)


def test_table_output(people, capsys):
    assert main(["dp", "stats", str(people), "--column", "age", "--query", "sum",
                 "--bounds", "0,100", "--epsilon", "1"]) == 0
    text = capsys.readouterr().out
    assert "epsilon" in text and "clipped" in text


@pytest.mark.parametrize("args,message", [
    (["--column", "nope", "--query", "mean", "--bounds", "0,1", "--epsilon", "1"],
     "not a column"),
    (["--column", "age", "--query", "mean", "--bounds", "90,17", "--epsilon", "1"], "bounds"),
    (["--column", "age", "--query", "mean", "--bounds", "a,b", "--epsilon", "1"], "bounds"),
    (["--column", "age", "--query", "mean", "--epsilon", "1"], "--bounds is required"),
    (["--column", "age", "--query", "mean", "--bounds", "0,1", "--epsilon", "0"], "epsilon"),
    (["--column", "age", "--query", "mean", "--bounds", "0,1", "--epsilon", "1",
      "--delta", "1.5"], "delta"),
    (["--column", "age", "--query", "median", "--bounds", "0,1", "--epsilon", "1"], "query"),
    (["--column", "sex", "--query", "mean", "--bounds", "0,1", "--epsilon", "1"],
     "not numeric"),
    (["--column", "age", "--query", "histogram", "--epsilon", "1"], "--bins"),
    (["--column", "age", "--query", "quantile", "--bounds", "0,1", "--epsilon", "1",
      "--delta", "1e-5"], "pure"),
])
def test_bad_arguments_exit_nonzero_with_a_message(people, capsys, args, message):
    assert main(["dp", "stats", str(people), *args]) != 0
    err = error_text(capsys)
    assert message in err and "Traceback" not in err


def test_bad_files(tmp_path, capsys):
    assert main(["dp", "stats", str(tmp_path / "missing.csv"), "--column", "a",
                 "--epsilon", "1", "--query", "count"]) != 0
    assert "not an existing file" in error_text(capsys)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,4,5,6\n")
    assert main(["dp", "stats", str(bad), "--column", "a", "--epsilon", "1",
                 "--query", "count"]) != 0
    assert "not a readable CSV" in error_text(capsys)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    assert main(["dp", "stats", str(binary), "--column", "a", "--epsilon", "1"]) != 0
    assert error_text(capsys).startswith("error:")
    assert main(["dp", "stats", str(bad)]) != 0  # missing required options: usage error


def test_dp_demo_json(capsys):
    assert main(["dp", "demo", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["statistics"]) == 9
    assert out["spent"]["epsilon"] <= out["budget"]["epsilon"] * (1 + 1e-9)
    assert all(row["epsilon"] > 0 for row in out["statistics"])


@pytest.mark.parametrize("query", ["mean", "sum", "variance", "histogram", "quantile"])
@pytest.mark.parametrize("bounds", ["-1e308,1e308", "0,1.7e308", "-1e200,1e200"])
def test_huge_bounds_are_one_line_errors_or_finite_answers(people, capsys, query, bounds):
    """Bounds whose width, doubled width or squared half-width overflow a float ended in an
    OverflowError traceback (``--bounds -1e308,1e308``): each is a one-line error naming the
    bounds or the noise scale, or a finite release, and with a ledger nothing is charged."""
    code = main(["dp", "stats", str(people), "--column", "age", "--query", query, "--bins",
                 "3", f"--bounds={bounds}", "--epsilon", "1", "--json"])
    captured = capsys.readouterr()
    if code == 0:
        value = json.loads(captured.out)["value"]
        assert all(map(np.isfinite, np.ravel(value)))
    else:
        assert code == 2 and captured.err.startswith("error: ")
        assert "Traceback" not in captured.err and "overflow" in captured.err


def test_a_tiny_epsilon_with_wide_bounds_has_no_finite_noise_scale(people, capsys):
    assert main(["dp", "stats", str(people), "--column", "age", "--query", "mean",
                 "--bounds=0,1e150", "--epsilon", "1e-300"]) == 2
    text = error_text(capsys)
    assert "overflow" in text and "larger epsilon" in text
