"""Audit records decided by fair coins, the ID3 tree's class probabilities, persisted ledgers."""

import dp_accounting
import numpy as np
import pytest

from veil.audit import one_run_epsilon_lower_bound
from veil.datasets import partition
from veil.dp import Ledger
from veil.errors import ConfigError, DataError
from veil.experiments.membership import AuditPool, LeafFrequencies, membership_scores
from veil.experiments.runs import ledger_folder, persisted_ledger, slug
from veil.experiments.tasks import load_task
from veil.fl.hybrid.fit import SimulatedAggregator, fit_queries
from veil.learn.tree import ID3Classifier, ID3Queries


def test_the_coins_withhold_exactly_the_tails_from_the_parties():
    X, y = np.arange(200).reshape(100, 2), np.arange(100) % 3
    pool = AuditPool.draw(100, 40, rng=0)
    assert pool.rows.size == np.unique(pool.rows).size == 40
    assert 0 <= pool.rows.min() and pool.rows.max() < 100
    parts = partition.iid(100, 4, rng=1)
    data = pool.party_data(X, y, parts)
    trained = np.concatenate([Xp[:, 0] // 2 for Xp, _ in data])
    # every record is trained on once, except the tails, which no party holds
    assert sorted(trained) == sorted(set(range(100)) - set(pool.withheld))
    assert set(pool.rows[pool.included]) <= set(trained)
    for (Xp, yp), part in zip(data, parts):
        assert set(Xp[:, 0] // 2) <= set(part)          # a coin never moves a record
        np.testing.assert_array_equal(yp, y[Xp[:, 0] // 2])
    scores = pool.scores(lambda Z: np.full((len(Z), 3), 1 / 3), X, y)
    assert scores["member_scores"].size == pool.included.sum()
    assert scores["nonmember_scores"].size == 40 - pool.included.sum()


def test_audit_pool_bad_input():
    with pytest.raises(ConfigError, match="audit_records"):
        AuditPool.draw(10, 11)
    with pytest.raises(ConfigError, match="audit_records"):
        AuditPool.draw(10, 1)
    pool = AuditPool.draw(10, 4, rng=0)
    with pytest.raises(DataError, match="drawn for 10"):
        pool.party_data(np.zeros((9, 1)), np.zeros(9), [np.arange(9)])


def test_leaf_frequencies_are_the_smoothed_counts_of_each_rows_node():
    X = np.array([[0, 0], [0, 1], [0, 1], [1, 0], [2, 1]])
    y = np.array([0, 0, 0, 1, 0])
    tree = ID3Classifier(max_depth=1, cardinalities=[3, 2]).fit(X, y)
    proba = LeafFrequencies(tree).predict_proba(np.array([[0, 1], [1, 1], [2, 0]]))
    # feature 0 splits: its leaves hold class counts (3, 0), (0, 1), (1, 0); add-one smoothed
    np.testing.assert_allclose(proba, [[4 / 5, 1 / 5], [1 / 3, 2 / 3], [2 / 3, 1 / 3]])
    np.testing.assert_allclose(membership_scores(tree, X[:2], y[:2]), np.log([4 / 5, 4 / 5]))


def test_the_audit_exposes_a_memorising_tree_and_not_its_dp_version():
    """Positive control: a depth-8 ID3 tree on digits (1258 training records) has leaves of a
    few records, so members are told apart (every one of the attack's guesses is right);
    grown from central-DP counts at epsilon = 1 (the noise stops it near the root) it stays
    below its certified epsilon (the one-run bound holds with probability 0.95 under DP; the
    seeds are fixed)."""
    task = load_task("digits", "tree", rng=0)
    pool = AuditPool.draw(task.y_train.size, 600, rng=1)
    data = pool.party_data(task.X_train, task.y_train, partition.iid(task.y_train.size, 3,
                                                                     rng=2))
    bounds = {}
    for method in ("none", "central"):
        ledger = Ledger(1.0, 1e-5) if method == "central" else None
        fit = fit_queries(ID3Queries(task.cardinalities, task.classes, max_depth=8),
                          SimulatedAggregator(data), method=method, ledger=ledger, rng=3)
        s = pool.scores(fit.model, task.X_train, task.y_train)
        scores = np.concatenate([s["member_scores"], s["nonmember_scores"]])
        included = np.arange(scores.size) < s["member_scores"].size
        bounds[method] = one_run_epsilon_lower_bound(scores, included, delta=1e-5, rng=4)
        if ledger is not None:
            certified = ledger.spent()[0]
    assert bounds["none"].epsilon > 1.5 and bounds["none"].correct == bounds["none"].guesses
    assert bounds["central"].epsilon <= certified <= 1.0 + 1e-9


def test_ledger_folder_never_deletes_an_earlier_runs_ledgers(tmp_path):
    folder = ledger_folder(tmp_path / "ledgers")
    assert slug("nursery tree: hybrid t=5") == "nursery-tree-hybrid-t-5"
    first = persisted_ledger(folder, "a b", 1.0, 1e-5)
    first.charge(dp_accounting.GaussianDpEvent(5.0), label="a query")
    assert first.spent()[0] > 0
    with pytest.raises(ConfigError, match="already belongs"):
        persisted_ledger(folder, "A  b", 1.0, 1e-5)
    first.close()
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ConfigError, match="never deletes a ledger"):
        ledger_folder(tmp_path / "ledgers")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    fresh = persisted_ledger(ledger_folder(tmp_path / "other"), "a b", 2.0, 0.0)
    assert fresh.epsilon == 2.0 and fresh.spent()[0] == 0.0 and not fresh.history()
    fresh.close()
