"""``veil dp query``: a persistent ledger, dry runs, JSON, clean errors; ``dp stats --ledger``."""

import json

import numpy as np
import pandas as pd
import pytest

from veil.cli.main import main
from veil.dp import Ledger


@pytest.fixture
def visits(tmp_path):
    r = np.random.default_rng(0)
    unit = np.repeat(np.arange(600), 3)
    df = pd.DataFrame({"id": unit, "ward": r.choice(["north", "south"], unit.size),
                       "age": r.integers(0, 100, unit.size)})
    path = tmp_path / "visits.csv"
    df.to_csv(path, sep=";", index=False)
    return path


def error_text(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def query(path, *extra):
    return ["dp", "query", str(path), "--privacy-unit", "id", "--group-by", "ward",
            "--agg", "count", "--agg", "mean(age, 0, 100)", "--max-groups", "2",
            "--max-rows", "3", *extra]


def test_release_charges_the_ledger_file(visits, tmp_path, capsys):
    ledger = tmp_path / "budget.sqlite"
    args = query(visits, "--epsilon", "1", "--delta", "1e-6", "--ledger", str(ledger),
                 "--budget-epsilon", "1.1", "--budget-delta", "1e-5", "--json")
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["ward"] for r in out["table"]} == {"north", "south"}
    assert all(0 <= r["mean(age)"] <= 100 for r in out["table"])
    assert out["plan"]["certified_epsilon"] <= 1.0
    with Ledger.open(ledger) as stored:
        assert len(stored.history()) == 1
    # a second query does not fit the stored budget: refused, nothing charged
    again = query(visits, "--epsilon", "1", "--delta", "1e-6", "--ledger", str(ledger))
    assert main(again) == 2
    assert "budget" in error_text(capsys)
    with Ledger.open(ledger) as stored:
        assert len(stored.history()) == 1


def test_dry_run_and_one_off_and_public_keys(visits, tmp_path, capsys):
    ledger = tmp_path / "b.sqlite"
    Ledger(2.0, 1e-5, path=ledger).close()
    assert main(query(visits, "--epsilon", "1", "--delta", "1e-6", "--ledger", str(ledger),
                      "--dry-run", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ledger"]["fits"] and out["ledger"]["spent_epsilon"] == 0.0
    assert out["plan"]["partition_selection"]["threshold"] > 3
    with Ledger.open(ledger) as stored:
        assert stored.history() == ()
    assert main(query(visits, "--epsilon", "1", "--keys", "north,south,east", "--one-off")) == 0
    text = capsys.readouterr().out
    assert "east" in text and "laplace" in text


def test_errors(visits, tmp_path, capsys):
    assert main(query(visits, "--epsilon", "1", "--delta", "1e-6")) == 2
    assert "--ledger" in error_text(capsys)
    assert main(query(visits, "--epsilon", "1", "--delta", "1e-6", "--ledger",
                      str(tmp_path / "new.sqlite"))) == 2
    assert "--budget-epsilon" in error_text(capsys)
    bad = ["dp", "query", str(visits), "--privacy-unit", "person", "--group-by", "ward",
           "--agg", "count", "--epsilon", "1", "--delta", "1e-6", "--one-off"]
    assert main(bad) == 2
    assert "'person' (privacy unit)" in error_text(capsys)
    assert main(query(visits, "--epsilon", "1", "--one-off")) == 2
    assert "partition selection" in error_text(capsys)
    assert main(["dp", "query", str(visits), "--privacy-unit", "id", "--agg",
                 "mean(age, 100, 0)", "--epsilon", "1", "--one-off"]) == 2
    assert "bounds" in error_text(capsys)


def test_stats_with_a_ledger_file(visits, tmp_path, capsys):
    ledger = tmp_path / "stats.sqlite"
    args = ["dp", "stats", str(visits), "--column", "age", "--query", "mean", "--bounds",
            "0,100", "--epsilon", "0.6", "--ledger", str(ledger), "--budget-epsilon", "1"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args[:-2]) == 2  # the second 0.6 does not fit the stored epsilon 1
    assert "budget" in error_text(capsys)
