"""The Truex et al. comparison: sweeps, summaries, files, and the CLI."""

import csv

import pytest

from veil.cli.main import main
from veil.errors import ConfigError
from veil.experiments import TruexConfig, parse_trust, plot, run_truex, summarize, write_csv
from veil.experiments.tasks import load_task, make_learner


def test_parse_trust():
    assert [parse_trust(t, 10) for t in ("1", "half", "n", " 7 ")] == [1, 5, 10, 7]
    assert parse_trust("half", 5) == 3
    for bad in ("0", "11", "most"):
        with pytest.raises(ConfigError, match="trust"):
            parse_trust(bad, 10)
    with pytest.raises(ConfigError, match="trust"):
        TruexConfig("digits", "logreg", parties=[3], trust=["5"])
    with pytest.raises(ConfigError, match="dataset"):
        TruexConfig("mnist", "logreg")
    with pytest.raises(ConfigError, match="epsilon"):
        TruexConfig("digits", "logreg", epsilons=[0.0])


def test_sweep_rows_summary_and_files(tmp_path):
    config = TruexConfig("digits", "logreg", parties=[3], trust=["1", "n"], epsilons=[0.5, 4.0],
                         repeats=2, options={"rounds": 5})
    seen = []
    rows = run_truex(config, rng=1, on_progress=lambda done, total, what: seen.append(
        (done, total)))
    # per repetition: no privacy once, then central, hybrid t=1, t=3, local per epsilon
    assert len(rows) == 2 * (1 + 2 * 4) and seen[-1] == (18, 18)
    methods = {(r["method"], r["trust"]) for r in rows}
    assert methods == {("none", ""), ("central", ""), ("hybrid", 1), ("hybrid", 3),
                       ("local", "")}
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
    rows = run_truex(TruexConfig("nursery", "tree", parties=[5], trust=["n"], epsilons=[5.0],
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
                   "--parties", "3", "--trust", "1,n", "--epsilon", "2", "--repeats", "1",
                   "--out", str(out), "--json"])
    assert status == 0
    for name in ("truex_digits_svm.csv", "truex_digits_svm_summary.csv", "truex_digits_svm.png"):
        assert (out / name).exists()
    assert '"summary"' in capsys.readouterr().out
    assert main(["experiment", "truex", "--parties", "3", "--trust", "4", "--out",
                 str(out)]) == 2
