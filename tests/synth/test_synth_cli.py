"""``veil synth fit`` / ``veil synth evaluate``: one charge, refusals before it, --force."""

from __future__ import annotations

import json

import numpy as np
import pytest

from veil.cli.main import main
from veil.dp import Ledger

SCHEMA = """
[columns.colour]
type = "categorical"
categories = ["red", "green", "blue"]

[columns.age]
type = "numeric"
edges = [0, 30, 60, 100]
integer = true
"""


@pytest.fixture
def files(tmp_path):
    g = np.random.default_rng(0)
    rows = ["colour;age"] + [f"{['red', 'green', 'blue'][i % 3]};{int(g.integers(0, 100))}"
                             for i in range(300)]
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "schema.toml").write_text(SCHEMA)
    return tmp_path


def _fit(files, *extra):
    return main(["synth", "fit", str(files / "data.csv"), "--schema", str(files / "schema.toml"),
                 "--epsilon", "1", "--delta", "1e-7", "--ledger", str(files / "l.db"),
                 "--out", str(files / "syn.csv"), "--json", *extra])


@pytest.mark.parametrize("method", ["aim", "mst", "independent"])
def test_fit_writes_the_table_and_charges_the_ledger_once(files, capsys, method):
    assert _fit(files, "--budget-epsilon", "3", "--method", method) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == method and out["rows"] > 0
    written = (files / "syn.csv").read_text().splitlines()
    assert written[0] == "colour;age" and len(written) == out["rows"] + 1
    assert len(Ledger.open(files / "l.db").history()) == 1


def test_an_existing_out_needs_force_and_nothing_is_charged(files, capsys):
    assert _fit(files, "--budget-epsilon", "3", "--budget-delta", "1e-6") == 0
    assert _fit(files) == 2
    assert "--force" in capsys.readouterr().err
    assert len(Ledger.open(files / "l.db").history()) == 1
    assert _fit(files, "--force") == 0
    assert len(Ledger.open(files / "l.db").history()) == 2


def test_an_unknown_category_is_one_line_and_charges_nothing(files, capsys):
    with open(files / "data.csv", "a") as f:
        f.write("purple;40\n")
    assert _fit(files, "--budget-epsilon", "3") == 2
    err = capsys.readouterr().err
    assert "'colour'" in err and "categories" in err
    assert Ledger.open(files / "l.db").history() == ()


def test_evaluate_reports_the_workload_error(files, capsys):
    assert _fit(files, "--budget-epsilon", "3") == 0
    capsys.readouterr()
    assert main(["synth", "evaluate", str(files / "data.csv"), str(files / "syn.csv"),
                 "--schema", str(files / "schema.toml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload_size"] == 1 and 0 <= out["workload_error"] < 0.5


def test_fit_writes_a_report_apart_from_the_release(files, capsys):
    report = files / "report"
    assert _fit(files, "--budget-epsilon", "3", "--method", "mst", "--report", str(report)) == 0
    page = (report / "report.html").read_text()
    assert page.count("class='one-way'") == 2 and "NOT differentially private" in page
    assert json.loads(capsys.readouterr().out)["report"] == str(report / "report.html")
    assert "NOT differentially" not in (files / "syn.csv").read_text()


@pytest.mark.parametrize("inside", [False, True])
def test_a_non_empty_report_folder_needs_force_and_nothing_is_charged(files, capsys, inside):
    """An existing report (or --out inside --report: the release beside non-private
    marginals) is refused before the ledger is opened."""
    report = files / "report"
    report.mkdir()
    (report / "old.html").write_text("an earlier report")
    out = ["--out", str(report / "syn.csv")] if inside else []
    assert _fit(files, "--budget-epsilon", "3", "--report", str(report), *out) == 2
    err = capsys.readouterr().err
    assert "--report" in err and ("--force" in err or inside)
    assert not (files / "l.db").exists()
    if not inside:
        assert _fit(files, "--budget-epsilon", "3", "--report", str(report), "--force") == 0
        assert (report / "report.html").exists() and (report / "old.html").exists()
