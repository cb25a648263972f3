"""Learners as queries: the integer grid, the methods, gradient learners, the ledger."""

import math

import numpy as np
import pytest

from veil.datasets import partition
from veil.dp import Ledger, PrivacyBudget
from veil.dp.distributed import DistributedSkellam
from veil.dp.trust import Trust
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.fl.hybrid.fit import METHODS, SimulatedAggregator, fit_queries, plan_multiplier
from veil.fl.hybrid.grid import contribute, grid_bits, query_noise, value_limit
from veil.learn import LinearSVC, LogisticRegression, SoftmaxRegression
from veil.learn.private.queries import GradientQueries
from veil.learn.queries import QueryShape


def _blobs(n=600, d=5, seed=0):
    gen = np.random.default_rng(seed)
    X = gen.uniform(-1, 1, size=(n, d))
    y = (X @ np.linspace(1, -1, d) + 0.2 * gen.normal(size=n) > 0).astype(int)
    return X, y


def _parties(X, y, n=5, seed=1):
    return [(X[p], y[p]) for p in partition.iid(len(y), n, rng=seed)]


def test_grid_sensitivity_bounds_the_rounded_sum():
    """Adding one record moves round(2^b * sum) by at most 2^b S_2 + sqrt(d) in L2 (and the
    L1 bound): checked on random sums and records of norm S_2."""
    shape = QueryShape(size=6, l1=6.0, l2=1.0, bound=1e6, frac_bits=4)
    l1, l2 = shape.grid_sensitivity(4)
    assert l2 == pytest.approx(16 + math.sqrt(6)) and l1 == pytest.approx(min(16 * 6 + 6, l2 ** 2))
    gen = np.random.default_rng(0)
    worst2 = worst1 = 0.0
    for _ in range(2000):
        base = gen.uniform(-50, 50, 6)
        rec = gen.normal(size=6)
        rec *= 1.0 / np.linalg.norm(rec)
        diff = np.rint((base + rec) * 16) - np.rint(base * 16)
        worst2, worst1 = max(worst2, np.linalg.norm(diff)), max(worst1, np.abs(diff).sum())
    assert worst2 <= l2 and worst1 <= l1
    counts = QueryShape(size=0, l1=3.0, l2=math.sqrt(3), bound=10.0, integer=True)
    assert counts.grid_sensitivity(0) == (3.0, math.sqrt(3))
    with pytest.raises(ConfigError, match="integer answers"):
        QueryShape(size=2, l1=1.0, l2=1.0, bound=1.0, integer=True, frac_bits=3)


def test_contribute_clips_rounds_and_adds_the_share():
    shape = QueryShape(size=4, l1=1.0, l2=1.0, bound=5.0, frac_bits=2)
    ints, clipped = contribute(shape, np.array([1.3, -7.0, 5.0, 0.1]), None, 1)
    assert ints.tolist() == [5, -20, 20, 0] and clipped == 1     # -7 clipped to -5
    mech = query_noise("skellam", 2.0, shape, trust=Trust(3, 2), delta=1e-5)
    assert mech.integer and grid_bits(shape, mech) == 2
    assert mech.l2_sensitivity == pytest.approx(4 + 2)          # 2^2 * 1 + sqrt(4)
    noisy, _ = contribute(shape, np.zeros(4), mech, 3)
    assert noisy.dtype == np.int64 and np.any(noisy != 0)
    assert value_limit(shape, mech) > value_limit(shape, mech, noisy=False) == 21
    gauss = query_noise("gaussian", 2.0, shape, trust=Trust(3, 2), delta=1e-5)
    assert grid_bits(shape, gauss) == 16 and gauss.sigma == pytest.approx(2.0)
    with pytest.raises(DataError, match="expects 4"):
        contribute(shape, np.zeros(3), None, 1)


def test_method_table():
    assert {m: (METHODS[m].encrypted, METHODS[m].noise) for m in METHODS} == {
        "none": (False, None), "smc": (True, None), "central": (False, "server"),
        "local": (False, "parties"), "hybrid": (True, "parties")}
    assert METHODS["local"].noise_parties(None, 7) == Trust(7, 1)
    assert METHODS["hybrid"].noise_parties(Trust(7, 3), 7) == Trust(7, 3)
    assert METHODS["central"].noise_parties(None, 7) == Trust(1, 1)
    with pytest.raises(ConfigError, match="trust=None"):
        METHODS["hybrid"].noise_parties(None, 7)
    with pytest.raises(ConfigError, match=r"Trust\(parties=8, honest=3\) is not allowed"):
        METHODS["hybrid"].noise_parties(Trust(8, 3), 7)


@pytest.mark.parametrize("model", [LogisticRegression(alpha=0.0), LinearSVC(alpha=0.0)])
def test_gradient_queries_without_noise_match_clipped_gradient_descent(model):
    X, y = _blobs()
    model.initialize(X.shape[1], [0, 1])
    learner = GradientQueries(model, rounds=5, learning_rate=0.5, clip_norm=0.5)
    fit = fit_queries(learner, SimulatedAggregator(_parties(X, y)), method="none")
    # the same steps centrally: clip every example's gradient, sum, divide by n
    ref = model.__class__(alpha=0.0).initialize(X.shape[1], [0, 1])
    w = ref.get_params_vector()
    for _ in range(5):
        ref.set_params_vector(w)
        g = ref.per_example_gradients(X, y)
        g = g * np.minimum(1.0, 0.5 / np.linalg.norm(g, axis=1))[:, None]
        w = w - 0.5 * g.sum(axis=0) / len(y)
    # the grid rounds each party's sums to 2^-17 (frac bits 16 - log2(0.5)), 5 parties
    assert np.allclose(fit.model.get_params_vector(), w, atol=1e-4)
    assert fit.clipped > 0 and fit.queries == 5


def test_private_gradient_learning_charges_the_ledger_and_local_is_noisier():
    X, y = _blobs(2000)
    parties = SimulatedAggregator(_parties(X, y, 10))

    def learner():
        model = SoftmaxRegression(alpha=0.0).initialize(X.shape[1], [0, 1])
        return GradientQueries(model, rounds=10, learning_rate=1.0)

    z = plan_multiplier(learner(), "skellam", 1.0, 1e-5)
    scores, stds = {}, {}
    for method, trust in (("central", None), ("hybrid", 5), ("local", None)):
        ledger = Ledger(1.0, 1e-5)
        fit = fit_queries(learner(), parties, method=method,
                          trust=None if trust is None else Trust(10, trust), noise="skellam",
                          ledger=ledger, noise_multiplier=z, rng=3)
        plan, *queries = ledger.history()
        assert plan.kind == "plan" and [c.block for c in queries] == [plan.index] * 10
        assert ledger.spent()[0] <= 1.0 + 1e-9
        scores[method] = fit.model.score(X, y)
        stds[method] = fit.answers[0].noise_std
    # aggregate noise: sigma (central), sqrt(n/t) sigma (hybrid), sqrt(n) sigma (local)
    assert stds["hybrid"] == pytest.approx(stds["central"] * math.sqrt(2), rel=1e-9)
    assert stds["local"] == pytest.approx(stds["central"] * math.sqrt(10), rel=1e-9)
    assert scores["central"] > 0.85
    # eleven rounds would not fit: the ledger refuses the plan before any query runs
    ledger = Ledger(1.0, 1e-5)
    lr = learner()
    lr.rounds = 11
    with pytest.raises(BudgetExceededError):
        fit_queries(lr, parties, method="central", noise="skellam", ledger=ledger,
                    noise_multiplier=z, rng=1)
    assert ledger.history() == ()


def test_neural_network_from_dpsgd_clipped_sums():
    torch = pytest.importorskip("torch")
    from veil.learn import TorchModel
    from veil.learn.dpsgd import clipped_grad_sum

    X, y = _blobs(300, d=4)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                 torch.nn.Linear(8, 2)).to(torch.float64)
    model = TorchModel(module).initialize(4, [0, 1])
    learner = GradientQueries(model, rounds=3, learning_rate=0.5, clip_norm=0.1)
    query = learner.next_query()
    total, clipped = learner.answer(query, X, y)
    ref = clipped_grad_sum(model.module_, torch.nn.CrossEntropyLoss(reduction="none"),
                           torch.from_numpy(X), torch.from_numpy(y), 0.1)
    assert np.allclose(total[:-1], ref.grad.numpy()) and clipped == ref.n_clipped > 0
    assert total[-1] == pytest.approx(0.25 * 0.1 * 300)
    fit = fit_queries(learner, SimulatedAggregator(_parties(X, y, 3)), method="hybrid",
                      trust=Trust(3, 2), noise="gaussian", budget=PrivacyBudget(5.0, 1e-5),
                      rng=1)
    assert fit.queries == 3 and np.all(np.isfinite(fit.model.get_params_vector()))


def test_bad_input():
    X, y = _blobs()
    with pytest.raises(ConfigError, match="initialized"):
        GradientQueries(LogisticRegression())
    model = LogisticRegression().initialize(X.shape[1], [0, 1])
    agg = SimulatedAggregator(_parties(X, y))
    with pytest.raises(ConfigError, match="method"):
        fit_queries(GradientQueries(model), agg, method="secret")
    with pytest.raises(ConfigError, match="adds noise: give budget="):
        fit_queries(GradientQueries(model), agg, method="central")
    with pytest.raises(ConfigError, match="budget=1.0 is not allowed"):
        fit_queries(GradientQueries(model), agg, method="central", budget=1.0)
    # the budget is given once: a ledger beside it must hold exactly it
    with pytest.raises(ConfigError, match="was calibrated for"):
        fit_queries(GradientQueries(model), agg, method="central",
                    budget=PrivacyBudget(1.0, 1e-5), ledger=Ledger(2.0, 1e-5))
    with pytest.raises(ConfigError, match=r"honest \(t\)=6 is not allowed"):
        fit_queries(GradientQueries(model), agg, method="hybrid",
                    trust=Trust(agg.parties, 6), budget=PrivacyBudget(1.0))
    with pytest.raises(DataError, match="pair"):
        SimulatedAggregator([X])
    with pytest.raises(ConfigError, match="delta"):
        DistributedSkellam(1.0, 0.0, parties=2, honest=1)
