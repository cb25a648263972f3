"""Run directories, the privacy report (JSON + HTML) and the ``veil audit`` command."""

from __future__ import annotations

import json
import pickle
import re
import time

import dp_accounting
import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from veil.audit import (
    Run,
    RunRecord,
    label_flip_canaries,
    loss_scores,
    privacy_report,
    read_run,
    write_run,
)
from veil.cli.main import main
from veil.dp import Ledger
from veil.dp.accounting import calibrate_noise
from veil.errors import DataError
from veil.random import default_rng

DELTA = 1e-5


def task():
    """A binary task with unit-norm rows: audit records split into members by fair coins,
    a pool for mislabelled canaries, and test records."""
    X, y = make_classification(n_samples=1600, n_features=300, n_informative=10, flip_y=0.1,
                               random_state=3)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    inside = default_rng(1).random(800) < 0.5
    audit_X, audit_y = X[:800], y[:800]
    return (audit_X[inside], audit_y[inside]), (audit_X[~inside], audit_y[~inside]), \
        (X[1000:], y[1000:]), (X[800:1000], y[800:1000])


class OutputPerturbedLogReg:
    """DP logistic regression by output perturbation (Chaudhuri, Monteleoni & Sarwate 2011):
    w* minimises sum_i loss(w; x_i, y_i) + (lam / 2) |w|^2 with |x| <= 1 and the 1-Lipschitz
    logistic loss; adding or removing one record moves w* by at most 1 / lam (strong
    convexity), so w* + N(0, (sigma / lam)^2 I) is the Gaussian mechanism with noise
    multiplier sigma, charged to the ledger before the noise is drawn."""

    def __init__(self, lam, noise_multiplier, ledger, rng):
        self.lam, self.sigma, self.ledger, self.rng = lam, noise_multiplier, ledger, rng

    def fit(self, X, y):
        base = LogisticRegression(C=1 / self.lam, fit_intercept=False, tol=1e-10,
                                  max_iter=10000).fit(X, y)
        self.ledger.charge(dp_accounting.GaussianDpEvent(self.sigma), label="output noise")
        noise = (self.sigma / self.lam) * self.rng.standard_normal(X.shape[1])
        self.coef_ = base.coef_[0] + noise
        self.classes_ = base.classes_
        return self

    def predict_proba(self, X):
        p = 1 / (1 + np.exp(-X @ self.coef_))
        return np.column_stack([1 - p, p])


def build_run(root) -> Run:
    members, nonmembers, test, pool = task()
    canaries = label_flip_canaries(*pool, 200, rng=5)
    train = canaries.training_set(*members)
    rng = default_rng(2)
    records = []
    for label, lam, epsilon in [("non-private, C=1e4", 1e-4, None),
                                ("non-private, C=1", 1.0, None),
                                ("dp eps=1", 1.0, 1.0), ("dp eps=8", 1.0, 8.0)]:
        start = time.perf_counter()
        if epsilon is None:
            model = LogisticRegression(C=1 / lam, max_iter=5000).fit(*train)
            ledger_name = None
        else:
            ledger_name = f"ledger-{epsilon:g}.sqlite"
            ledger = Ledger(epsilon, DELTA, path=root / ledger_name)
            sigma = calibrate_noise(epsilon, DELTA, accountant="pld")
            model = OutputPerturbedLogReg(lam, sigma, ledger, rng).fit(*train)
            ledger.close()
        seconds = time.perf_counter() - start
        accuracy = float(np.mean((model.predict_proba(test[0])[:, 1] > 0.5) == test[1]))
        records.append(RunRecord(
            label=label, ledger=ledger_name, epsilon=epsilon, delta=DELTA if epsilon else None,
            accuracy=accuracy, cost={"seconds": round(seconds, 3)},
            arrays={"member_scores": loss_scores(model, *members),
                    "nonmember_scores": loss_scores(model, *nonmembers),
                    "canary_scores": canaries.scores(model),
                    "canary_included": canaries.included}))
    return Run(name="logistic regression sweep", kind="central", records=records)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    write_run(root, build_run(root))
    return root


def test_run_directory_round_trip(run_dir):
    run = read_run(run_dir)
    assert run.kind == "central" and len(run.records) == 4
    dp = run.records[2]
    assert dp.ledger == "ledger-1.sqlite" and dp.epsilon == 1.0 and dp.delta == DELTA
    assert set(dp.arrays) == {"member_scores", "nonmember_scores", "canary_scores",
                              "canary_included"}
    assert dp.arrays["member_scores"].size + dp.arrays["nonmember_scores"].size == 800


def test_privacy_report_certified_empirical_and_mi(run_dir, tmp_path):
    report = privacy_report(run_dir, rng=3)
    runs = {r["label"]: r for r in report.data["runs"]}
    for label in ("dp eps=1", "dp eps=8"):
        cert = runs[label]["certified"]
        assert cert["source"] == "ledger" and cert["charges"] == 1
        assert cert["epsilon"] <= float(label.split("=")[1]) + 1e-9
        assert runs[label]["consistent"] is True
        assert runs[label]["mi"]["ceiling_nats"] > 0
    overfit = runs["non-private, C=1e4"]
    assert overfit["certified"] is None and "consistent" not in overfit
    # the memorised canaries give the non-private model away
    assert overfit["empirical_epsilon"]["canaries (one-run)"]["epsilon"] > 1.0
    for r in runs.values():
        assert set(r["empirical_epsilon"]) == {"audit records (one-run)", "canaries (one-run)"}
        assert "auc" in r["attack"] and "sample_model" in r["mi"]
    json_path, html_path = report.write(tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["format"] == "veil-privacy-report/1" and len(data["runs"]) == 4
    page = html_path.read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 4  # privacy-utility, audit tightness, MI across epsilon, ROC
    assert all(len(b) > 1000 for b in images)
    assert "<script" not in page and "http" not in page  # self-contained


def test_veil_audit_run_dir(run_dir, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["audit", str(run_dir), "--out", str(out), "--seed", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "logistic regression sweep"
    assert (out / "report.html").is_file() and (out / "report.json").is_file()
    before = (out / "report.json").read_bytes()
    # a second audit into the same folder is refused (getting-started promises it) ...
    assert main(["audit", str(run_dir), "--out", str(out), "--seed", "4"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "report.json").read_bytes() == before
    # ... unless asked
    assert main(["audit", str(run_dir), "--out", str(out), "--seed", "4", "--force"]) == 0
    assert "veil privacy audit" in capsys.readouterr().out


def test_veil_audit_model(tmp_path, capsys):
    members, nonmembers, _, _ = task()
    model = LogisticRegression(C=1e4, max_iter=5000).fit(*members)
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(model))
    np.savez(tmp_path / "in.npz", X=members[0], y=members[1])
    np.savez(tmp_path / "out.npz", X=nonmembers[0], y=nonmembers[1])
    code = main(["audit", "--model", str(tmp_path / "model.pkl"), "--members",
                 str(tmp_path / "in.npz"), "--nonmembers", str(tmp_path / "out.npz"),
                 "--out", str(tmp_path / "r"), "--seed", "1", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    (entry,) = data["runs"]
    assert entry["accuracy"] > 0.6 and entry["attack"]["n_members"] == len(members[1])


def test_veil_audit_bad_input(tmp_path, capsys):
    assert main(["audit"]) == 2
    assert "either RUN_DIR or --model" in capsys.readouterr().err
    assert main(["audit", str(tmp_path)]) == 2
    assert "no run.json" in capsys.readouterr().err
    np.savez(tmp_path / "bad.npz", X=np.zeros((3, 2)))
    assert main(["audit", "--model", str(tmp_path / "bad.npz"), "--members",
                 str(tmp_path / "bad.npz"), "--nonmembers", str(tmp_path / "bad.npz")]) == 2


def test_run_directory_validation(tmp_path):
    with pytest.raises(DataError, match="comes? as a pair|come as a pair"):
        write_run(tmp_path / "a", Run("x", "central", [RunRecord(
            "r", arrays={"member_scores": np.ones(3)})]))
    with pytest.raises(DataError, match="unknown array"):
        write_run(tmp_path / "b", Run("x", "central", [RunRecord(
            "r", arrays={"scores": np.ones(3)})]))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "run.json").write_text(json.dumps({"format": "other/9", "runs": []}))
    with pytest.raises(DataError, match="format"):
        read_run(tmp_path / "c")
    (tmp_path / "c" / "run.json").write_text(json.dumps(
        {"format": "veil-run/1", "runs": [{"label": "a", "delta": 2.0}]}))
    with pytest.raises(DataError, match="delta"):
        read_run(tmp_path / "c")
    (tmp_path / "c" / "run.json").write_text(json.dumps(
        {"format": "veil-run/1", "runs": [{"label": "a", "ledger": "missing.sqlite"}]}))
    with pytest.raises(DataError, match="does not exist"):
        privacy_report(tmp_path / "c")


def test_groups_are_curves_of_their_own(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from veil.audit.report import _curve

    records = [RunRecord(f"{g} eps={e:g}", epsilon=e, delta=DELTA, accuracy=a, group=g)
               for g, e, a in (("A", 4.0, 0.8), ("B", 1.0, 0.6), ("A", 1.0, 0.7),
                               ("B", 4.0, 0.75))]
    write_run(tmp_path, Run("groups", "central", [*records, RunRecord("plain", accuracy=0.9)]))
    run = read_run(tmp_path)
    assert [r.group for r in run.records] == ["A", "B", "A", "B", None]
    entries = privacy_report(run, rng=0).data["runs"]
    fig, ax = plt.subplots()
    _curve(ax, entries, lambda e: e["accuracy"], "accuracy", "o-")
    assert ax.get_legend_handles_labels()[1] == ["A", "B", "plain (no DP)"]
    # each group one line through its records in epsilon order; every entry its own colour
    assert [list(line.get_xydata().ravel()) for line in ax.lines[:2]] == [
        [1.0, 0.7, 4.0, 0.8], [1.0, 0.6, 4.0, 0.75]]
    assert len({line.get_color() for line in ax.lines}) == 3
    plt.close(fig)
    doc = json.loads((tmp_path / "run.json").read_text())
    doc["runs"][0]["group"] = 3
    (tmp_path / "run.json").write_text(json.dumps(doc))
    with pytest.raises(DataError, match="'group' must be a string"):
        read_run(tmp_path)
