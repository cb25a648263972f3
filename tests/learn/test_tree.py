"""ID3: the central tree on known data, and the query-based tree against it."""

import numpy as np
import pytest

from veil.datasets import partition
from veil.dp import PrivacyBudget
from veil.dp.trust import Trust
from veil.errors import ConfigError, DataError
from veil.fl.hybrid.fit import SimulatedAggregator, fit_queries
from veil.learn.queries import QueryAnswer
from veil.learn.tree import ID3Classifier, ID3Queries, count_table


def _xor_data():
    """y = x0 XOR x1 on a 2x2x3 grid; x2 is noise: no single attribute has any gain."""
    rows = [(a, b, c) for a in range(2) for b in range(2) for c in range(3)]
    X = np.array(rows * 4)
    y = np.array([["no", "yes"][a ^ b] for a, b, _ in rows * 4])
    return X, y


def test_central_id3_is_greedy_on_xor():
    X, y = _xor_data()
    tree = ID3Classifier(max_depth=3).fit(X, y)
    assert tree.classes_.tolist() == ["no", "yes"]
    assert tree.cardinalities_ == [2, 2, 3]
    # x0 and x1 alone have zero gain on XOR and ID3 does not look ahead: the root is a
    # leaf (ties in the counts go to the first class)
    assert tree.tree_[0].feature == -1 and len(tree.tree_) == 1
    assert tree.score(X, y) == 0.5 and tree.predict(X[:1]).tolist() == ["no"]
    # once x0 is fixed by the data, x1 decides: the tree is exact
    half = X[:, 0] == 0
    assert ID3Classifier(max_depth=3).fit(X[half], y[half]).score(X[half], y[half]) == 1.0


def test_central_id3_splits_on_the_informative_attribute():
    # y = x1, x0 random-ish, x2 constant
    X = np.array([[i % 3, i % 2, 0] for i in range(60)])
    y = X[:, 1] * 10
    tree = ID3Classifier(max_depth=4).fit(X, y)
    assert tree.tree_[0].feature == 1
    assert tree.depth_ == 1 and tree.score(X, y) == 1.0
    assert set(tree.tree_[0].children) == {0, 1}
    # a value never seen below a node falls back to that node's label
    assert tree.predict(np.array([[2, 1, 0]])).tolist() == [10]


def test_depth_limit_and_min_samples():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(300, 4))
    y = (X[:, 0] + X[:, 1] + X[:, 2]) % 2
    shallow = ID3Classifier(max_depth=1).fit(X, y)
    assert shallow.depth_ <= 1
    stump = ID3Classifier(max_depth=3, min_samples_split=10_000).fit(X, y)
    assert len(stump.tree_) == 1
    assert ID3Classifier(max_depth=0).fit(X, y).depth_ == 0


def test_count_table_layout():
    X = np.array([[0, 1], [1, 1], [1, 0], [1, 1]])
    codes = np.array([0, 1, 1, 0])
    table = count_table([[], [0, 1]], True, X, codes, [2, 2], 2)
    # root: classes [2, 2]; x0 table [[1,0],[1,2]] row-major; x1 table [[0,1],[2,1]];
    # node x0=1: classes [1, 2]; x1 table (remaining) [[0,1],[1,1]]
    assert table.tolist() == [2, 2, 1, 0, 1, 2, 0, 1, 2, 1, 1, 2, 0, 1, 1, 1]
    assert count_table([[0, 0]], False, X, codes, [2, 2], 2).tolist() == [1, 0]


def _nursery_codes():
    from veil.datasets import load_nursery
    from veil.datasets.tabular import NURSERY_CATEGORIES, NURSERY_COLUMNS

    df = load_nursery()
    cols = NURSERY_COLUMNS[:-1]
    X = np.stack([[NURSERY_CATEGORIES[c].index(v) for v in df[c]] for c in cols], axis=1)
    y = np.array([NURSERY_CATEGORIES["class"].index(v) for v in df["class"]])
    return X, y, [len(NURSERY_CATEGORIES[c]) for c in cols]


def test_query_id3_without_noise_equals_central_id3(nursery_available):
    X, y, cards = _nursery_codes()
    central = ID3Classifier(max_depth=4, cardinalities=cards).fit(X, y)
    assert central.score(X, y) > 0.85
    parts = partition.dirichlet(y, 7, alpha=0.5, rng=3)     # label-skewed parties
    agg = SimulatedAggregator([(X[p], y[p]) for p in parts])
    for method in ("none", "smc"):
        fit = fit_queries(ID3Queries(cards, np.unique(y), max_depth=4), agg, method=method)
        assert fit.model.structure() == central.structure()
        assert fit.ledger is None and fit.queries == central.depth_ + 1
        for a, b in zip(fit.model.tree_, central.tree_):
            assert np.array_equal(a.counts, b.counts)
        assert np.array_equal(fit.model.predict(X), central.predict(X))


def test_query_id3_on_synthetic_parties_equals_central():
    rng = np.random.default_rng(1)
    X = rng.integers(0, 4, size=(2000, 5))
    y = np.where(X[:, 2] > 1, "a", np.where(X[:, 4] == 0, "b", "c"))
    central = ID3Classifier(max_depth=3, cardinalities=[4] * 5).fit(X, y)
    parts = partition.iid(len(y), 5, rng=2)
    fit = fit_queries(ID3Queries([4] * 5, ["a", "b", "c"], max_depth=3),
                      SimulatedAggregator([(X[p], y[p]) for p in parts]), method="none")
    assert fit.model.structure() == central.structure()
    assert central.score(X, y) == 1.0


def test_private_id3_charges_each_depth_and_stays_within_budget():
    rng = np.random.default_rng(2)
    X = rng.integers(0, 3, size=(3000, 4))
    y = (X[:, 0] == 0).astype(int)
    agg = SimulatedAggregator([(X[p], y[p]) for p in partition.iid(len(y), 4, rng=1)])
    learner = ID3Queries([3] * 4, [0, 1], max_depth=3)
    plan = learner.plan()
    assert [s.l1 for s in plan] == [5, 4, 3, 1]     # |A_left| + 1, leaves: class counts
    fit = fit_queries(learner, agg, method="hybrid", trust=Trust(4, 2), noise="laplace",
                      budget=PrivacyBudget(2.0), rng=5)
    history = fit.ledger.history()
    assert len(history) == fit.queries >= 1
    assert all(c.label.startswith("hybrid id3 depth") for c in history)
    assert fit.ledger.spent()[0] <= 2.0 + 1e-9
    # each depth costs epsilon / (d + 1), Friedman & Schuster's split
    assert fit.ledger.spent()[0] == pytest.approx(2.0 * fit.queries / 4)
    assert fit.model.score(X, y) > 0.9     # one strong attribute survives the noise


def test_bad_input():
    with pytest.raises(DataError, match="outside the categories"):
        ID3Classifier(cardinalities=[2, 2]).fit(np.array([[0, 2], [1, 1]]), [0, 1])
    with pytest.raises(DataError, match="integer category codes"):
        ID3Classifier().fit(np.array([[0.5, 1.0], [1.0, 0.0]]), [0, 1])
    with pytest.raises(ConfigError, match="max_depth"):
        ID3Queries([2], [0, 1], max_depth=-1)
    with pytest.raises(ConfigError, match="two classes"):
        ID3Queries([2], [0])
    learner = ID3Queries([2, 2], [0, 1])
    q = learner.next_query()
    with pytest.raises(DataError, match="labels outside"):
        learner.answer(q, np.array([[0, 1]]), np.array([7]))
    with pytest.raises(ConfigError, match="not fitted"):
        ID3Classifier().predict(np.array([[0]]))
    # an update with a wrong-length aggregate cannot silently build a tree
    with pytest.raises(DataError, match="3 values"):
        learner.update(q, QueryAnswer(np.zeros(3)))
