"""The Truex et al. comparison: sweeps, summaries, files, and the CLI."""

import csv
import json

import numpy as np
import pytest

from veil.audit import read_run
from veil.cli.main import main
from veil.dp import Ledger
from veil.errors import ConfigError
from veil.experiments import TruexConfig, parse_honest, plot, run_truex, summarize, write_csv
from veil.experiments.tasks import load_task, make_learner


def test_parse_honest():
    assert [parse_honest(t, 10).honest for t in ("1", "half", "n", " 7 ")] == [1, 5, 10, 7]
    assert [parse_honest(t, 10).threshold for t in ("1", "half", "n")] == [10, 6, 1]
    assert parse_honest("half", 5).honest == 3
    for bad in ("0", "11", "most"):
        with pytest.raises(ConfigError, match="honest"):
            parse_honest(bad, 10)
    with pytest.raises(ConfigError, match="honest"):
        TruexConfig("digits", "logreg", parties=[3], honest=["5"])
    with pytest.raises(ConfigError, match="dataset"):
        TruexConfig("mnist", "logreg")
    with pytest.raises(ConfigError, match="epsilon"):
        TruexConfig("digits", "logreg", epsilons=[0.0])


def test_sweep_rows_summary_and_files(tmp_path):
    config = TruexConfig("digits", "logreg", parties=[3], honest=["1", "n"], epsilons=[0.5, 4.0],
                         repeats=2, options={"rounds": 5})
    seen = []
    rows = run_truex(config, rng=1, on_progress=lambda done, total, what: seen.append(
        (done, total)))
    # per repetition: no privacy once, then central, hybrid t=1, t=3, local per epsilon
    assert len(rows) == 2 * (1 + 2 * 4) and seen[-1] == (18, 18)
    methods = {(r["method"], r["honest"], r["threshold"]) for r in rows}
    assert methods == {("none", "", ""), ("central", "", ""), ("hybrid", 1, 3),
                       ("hybrid", 3, 1), ("local", "", "")}
    for r in rows:
        assert 0 <= r["accuracy"] <= 1 and r["noise"] == "gaussian"
        if r["method"] != "none":
            assert r["epsilon_spent"] <= r["epsilon"] * (1 + 1e-9)
            assert r["queries"] == 5
    summary = summarize(rows)
    assert len(summary) == 1 + 2 * 4 and all(s["repeats"] == 2 for s in summary)
    write_csv(rows, tmp_path / "rows.csv")
    with open(tmp_path / "rows.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    plot(summary, tmp_path / "plot.png", title="test")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tree_task_on_nursery(nursery_available):
    task = load_task("nursery", "tree", rng=0)
    assert task.X_train.shape[1] == 8 and task.cardinalities == (3, 5, 4, 4, 3, 2, 3, 3)
    assert len(task.y_train) + len(task.y_test) == 12960
    rows = run_truex(TruexConfig("nursery", "tree", parties=[5], honest=["n"], epsilons=[5.0],
                                 repeats=1), rng=2)
    accuracy = {r["method"]: r["accuracy"] for r in rows}
    assert accuracy["none"] > 0.85 and accuracy["central"] > 0.7


def test_adult_tasks(adult_available):
    tree = load_task("adult", "tree")
    assert tree.X_train.shape == (30162, 12) and tree.X_test.shape[0] == 15060
    logreg = load_task("adult", "logreg")
    learner = make_learner(logreg)
    assert learner.shape.size == logreg.X_train.shape[1] + 2     # weights, intercept, count


def test_cli_writes_csv_and_png(tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["experiment", "truex", "--dataset", "digits", "--model", "svm",
                   "--parties", "3", "--honest", "1,n", "--epsilon", "2", "--repeats", "1",
                   "--out", str(out), "--json"])
    assert status == 0
    for name in ("truex_digits_svm.csv", "truex_digits_svm_summary.csv", "truex_digits_svm.png",
                 "run.json"):
        assert (out / name).exists()
    assert '"summary"' in capsys.readouterr().out
    # without --report: no ledger files; the records declare what the ledgers spent
    run = read_run(out)
    assert not (out / "ledgers").exists() and not (out / "audit").exists()
    assert [r.label for r in run.records] == ["n=3: no privacy / SMC", "n=3: central DP, eps=2",
                                              "n=3: hybrid honest=1, threshold 3, eps=2",
                                              "n=3: hybrid honest=3, threshold 1, eps=2",
                                              "n=3: local DP, eps=2"]
    assert all(0 < r.epsilon <= 2.0 + 1e-9 and r.ledger is None for r in run.records[1:])
    assert main(["experiment", "truex", "--parties", "3", "--honest", "4", "--out",
                 str(out)]) == 2


def test_cli_report_certifies_every_cell_from_its_ledgers(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["experiment", "truex", "--dataset", "digits", "--model", "logreg", "--parties", "3",
            "--honest", "n", "--epsilon", "0.5,4", "--repeats", "2", "--out", str(out),
            "--report", "--json"]
    assert main(args) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert str(out / "audit" / "report.html") in files
    with open(out / "truex_digits_logreg.csv") as f:
        cells: dict[tuple, list] = {}
        for row in csv.DictReader(f):
            cells.setdefault((row["method"], row["honest"], row["epsilon"]), []).append(row)
    run = read_run(out)
    # one record per (parties, method, honest, epsilon) cell, a curve per (method, honest)
    assert len(run.records) == len(cells) == 1 + 2 * 3
    assert {r.group for r in run.records} == {"n=3: no privacy / SMC", "n=3: central DP",
                                              "n=3: hybrid honest=3, threshold 1",
                                              "n=3: local DP"}
    report = json.loads((out / "audit" / "report.json").read_text())
    folder = out / "ledgers" / "truex_digits_logreg"
    for record, entry, cell in zip(run.records, report["runs"], cells.values()):
        assert len(cell) == 2 and record.metrics["repeats"] == 2
        assert record.accuracy == pytest.approx(np.mean([float(r["accuracy"]) for r in cell]))
        if cell[0]["method"] == "none":
            assert record.ledger is None and entry["certified"] is None
            continue
        # certified: the largest spend among the cell's persisted ledgers, within its budget
        ledgers = [Ledger.open(folder / r["ledger"]) for r in cell]
        assert entry["certified"]["source"] == "ledger"
        assert entry["certified"]["epsilon"] == pytest.approx(max(x.spent()[0] for x in ledgers))
        assert entry["certified"]["epsilon"] <= float(cell[0]["epsilon"]) + 1e-9
        for x in ledgers:
            x.close()
    page = (out / "audit" / "report.html").read_text()
    assert "Privacy-utility curve" in page and "data:image/png;base64," in page
