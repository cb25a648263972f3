"""Registered release paths of the private models (:mod:`veil.learn.private`) and of DP-SGD
(:mod:`veil.learn.dpsgd`): small data, small models, a record at the norm bound with an
extreme label as the neighbour (the worst case of every clipped, bounded-norm analysis).
"""

from __future__ import annotations

import functools

import numpy as np

from veil.audit.conformance.registry import ADD_REMOVE, Pair, register
from veil.dp import Ledger, PrivacyBudget
from veil.learn.private import GaussianNB, KMeans, LinearRegression, LinearSVC, LogisticRegression

EPS, DELTA = 1.0, 1e-5
_X = np.array([[0.5 * np.cos(t), 0.5 * np.sin(t)] for t in np.linspace(0, 6, 16)])
_Y = (np.arange(16) % 2).astype(int)


def _pairs():
    far = np.array([[1.0, 0.0]])            # at the declared norm / bounds
    outside = np.array([[50.0, -50.0]])     # clipped into them
    return [Pair("a record at the bound, extreme label", (_X, _Y),
                 (np.vstack([_X, far]), np.append(_Y, 1))),
            Pair("a record far outside the bounds", (_X, _Y),
                 (np.vstack([_X, outside]), np.append(_Y, 0)))]


def _coef(model) -> float:
    """The first learned parameter (coefficients, class means or cluster centres)."""
    name = next(n for n in ("coef_", "theta_", "cluster_centers_") if hasattr(model, n))
    return float(np.ravel(getattr(model, name))[0])


def _shape(model):
    fitted = sorted(k for k in vars(model) if k.endswith("_") and k != "ledger_")
    return fitted, [np.shape(getattr(model, k)) for k in fitted]


def _fit(make):
    def run(data, rng):
        X, y = data
        return make(rng).fit(X, y)
    return run


_MODEL = dict(relation=ADD_REMOVE, pairs=_pairs, reduce=_coef, structure=_shape, trials=4)
register("learn.private.LogisticRegression (objective)", epsilon=EPS, **_MODEL,
         covers=("veil.learn.private.linear:_PrivateLinear._fit_objective",))(
    _fit(lambda rng: LogisticRegression(epsilon=EPS, data_norm=1.0, classes=[0, 1],
                                        ledger=Ledger(EPS), rng=rng)))
register("learn.private.LinearSVC (objective)", epsilon=EPS, **_MODEL)(
    _fit(lambda rng: LinearSVC(epsilon=EPS, data_norm=1.0, classes=[0, 1],
                               ledger=Ledger(EPS), rng=rng)))
register("learn.private.LogisticRegression (dpsgd)", epsilon=EPS, delta=DELTA,
         **_MODEL, fast=False, covers=("veil.learn.private.sgd:dp_sgd",))(
    _fit(lambda rng: LogisticRegression(epsilon=EPS, delta=DELTA, data_norm=1.0,
                                        method="dpsgd", epochs=2, batch_size=8, n=16,
                                        classes=[0, 1], ledger=Ledger(EPS, DELTA), rng=rng)))
register("learn.private.LinearRegression", epsilon=EPS, **_MODEL,
         covers=("veil.learn.private.linear_regression:LinearRegression.fit",))(
    _fit(lambda rng: LinearRegression(epsilon=EPS, bounds_X=(-1.0, 1.0), bounds_y=(0.0, 1.0),
                                      ledger=Ledger(EPS), rng=rng)))
register("learn.private.GaussianNB", epsilon=EPS, **_MODEL,
         covers=("veil.learn.private.naive_bayes:GaussianNB.fit",))(
    _fit(lambda rng: GaussianNB(epsilon=EPS, bounds=(-1.0, 1.0), classes=[0, 1],
                                ledger=Ledger(EPS), rng=rng)))
register("learn.private.KMeans", epsilon=EPS, **_MODEL,
         covers=("veil.learn.private.kmeans:KMeans.fit",))(
    _fit(lambda rng: KMeans(2, epsilon=EPS, bounds=(-1.0, 1.0), max_iter=2,
                            ledger=Ledger(EPS), rng=rng)))


# -- DP-SGD (torch) --------------------------------------------------------------------
_STEPS = dict(epochs=1, sample_rate=0.5)


@functools.lru_cache(maxsize=1)
def _sigma() -> float:
    """The noise multiplier make_private(budget=PrivacyBudget(EPS, DELTA)) calibrates for
    this schedule."""
    from veil.dp.accounting import calibrate_noise

    return calibrate_noise(EPS, DELTA, 0.5, 2, dataset_size=16)


def _dpsgd(size):
    def run(data, rng):
        import torch

        from veil.learn.dpsgd import make_private

        X, y = data
        torch.manual_seed(0)   # the same initial model on both sides: only the data differ
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        budget = {"budget": PrivacyBudget(EPS, DELTA)} if not isinstance(size, int) else {
            "noise_multiplier": _sigma(), "delta": DELTA}  # the same sigma, not calibrated
        model, opt, loader = make_private(
            model, opt, (torch.tensor(X, dtype=torch.float32), torch.tensor(y)),
            max_grad_norm=1.0, dataset_size=size, ledger=Ledger(EPS, DELTA), rng=rng,
            **budget, **_STEPS)
        loss = torch.nn.CrossEntropyLoss()
        for xb, yb in loader:
            opt.zero_grad()
            loss(model(xb), yb).backward()
            opt.step()
        return model.module, opt.plan
    return run


def _weights(out) -> float:
    return float(out[0].weight.detach().numpy()[0, 0])


register("learn.dpsgd.make_private", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
         pairs=_pairs, reduce=_weights, trials=4, needs=("torch",),
         structure=lambda out: [tuple(p.shape) for p in out[0].parameters()],
         covers=("veil.learn.dpsgd.privacy:make_private",))(_dpsgd(size=16))


def _size_estimate():
    from veil.learn.dpsgd.size import EstimatedSize

    return EstimatedSize(0.5)


register("learn.dpsgd dataset size estimate", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
         pairs=_pairs, reduce=lambda out: float(out[1].dataset_size), trials=4,
         needs=("torch",), fast=False, covers=("veil.learn.dpsgd.size:estimated_size",))(
    lambda data, rng: _dpsgd(size=_size_estimate())(data, rng))
