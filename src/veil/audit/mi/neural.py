"""Neural (variational) lower-bound estimators of mutual information, with torch.

Both train a critic T(x, y) (an MLP on the concatenated pair) on part of the data and
evaluate the bound on the held-out rest, where T was not fitted (an in-sample evaluation
would be biased upward by the critic's overfitting).

MINE — Belghazi et al. (2018), "Mutual Information Neural Estimation", ICML. The
Donsker–Varadhan representation gives, for every critic T,

    I(X; Y) >= E_P[T] - log E_{P_X x P_Y}[e^T].

The minibatch gradient of log E[e^T] is biased (the expectation sits in a denominator); MINE
replaces the denominator by an exponential moving average ``ma`` of the batch means of
e^T (rate ``ema``): the loss is -(mean T_joint - mean(e^T_marginal) / ma), whose gradient is
E[grad T] - E[e^T grad T] / ma. Marginal pairs are the off-diagonal pairs (x_i, y_j), i != j,
of a batch. Bias: a lower bound in population; on a finite evaluation set log(mean e^T)
is biased low (Jensen), pulling the estimate up, while limited capacity and training pull it
down; its variance grows like e^I (McAllester & Stratos 2020), so large MI is unreliable.

InfoNCE — van den Oord, Li & Vinyals (2018), "Representation learning with contrastive
predictive coding"; Poole et al. (2019), "On variational bounds of mutual information". For a
batch of B pairs,

    I(X; Y) >= E[ (1/B) sum_i log( e^{T(x_i, y_i)} / ((1/B) sum_j e^{T(x_i, y_j)}) ) ],

a bound that can never exceed log B: with B evaluation pairs the estimate saturates at
log B whatever the true MI (``MIEstimate.method`` names the ceiling). Low variance, biased
low whenever the true MI approaches log B.

Interval: the critic is fixed and the rows of the held-out score matrix are resampled with
replacement (the bootstrap of the evaluation); it covers evaluation noise, not the
variability of training.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import logsumexp

from veil._optional import require
from veil._validation import check_int, check_positive, check_probability
from veil.audit.mi.estimate import (
    MIEstimate,
    as_columns,
    check_interval_options,
    check_not_constant,
    check_pair,
    standardize,
)
from veil.random import check_rng

MINE_BIAS = ("MINE (Donsker-Varadhan lower bound, held-out evaluation): biased low by critic "
             "capacity/training, high variance growing like e^I; unreliable for large MI")
INFONCE_BIAS = ("InfoNCE lower bound: low variance, but never exceeds log(batch) and is biased "
                "low as the true MI approaches that ceiling")


def _torch() -> Any:
    return require("torch", "torch", "the MINE and InfoNCE estimators")


def _critic(torch, d_in: int, hidden: int):
    nn = torch.nn
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, 1))


def _pair_scores(torch, critic, x, y):
    """Matrix S_ij = T(x_i, y_j) for all pairs of a batch."""
    b = x.shape[0]
    pairs = torch.cat([x.repeat_interleave(b, 0), y.repeat(b, 1)], dim=1)
    return critic(pairs).reshape(b, b)


def _offdiag(torch, scores):
    b = scores.shape[0]
    return scores[~torch.eye(b, dtype=torch.bool)]


def _row_terms(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per evaluation row i: S_ii, log mean_{j != i} e^{S_ij} and log mean_j e^{S_ij}."""
    b = scores.shape[0]
    diag = np.diag(scores).copy()
    off = np.where(np.eye(b, dtype=bool), -np.inf, scores)
    log_off = logsumexp(off, axis=1) - np.log(b - 1)
    log_all = logsumexp(scores, axis=1) - np.log(b)
    return diag, log_off, log_all


def _bound(objective: str, terms, rows: np.ndarray) -> float:
    """The bound on the evaluation rows ``rows``: Donsker–Varadhan
    mean_i S_ii - log mean_{i, j != i} e^{S_ij}, or InfoNCE mean_i [S_ii - log mean_j e^{S_ij}]."""
    diag, log_off, log_all = terms
    if objective == "mine":
        return float(np.mean(diag[rows]) - (logsumexp(log_off[rows]) - np.log(rows.size)))
    return float(np.mean(diag[rows] - log_all[rows]))


def _neural(x, y, *, objective: str, hidden: int, steps: int, batch_size: int, lr: float,
            ema: float, holdout: float, max_eval: int, bootstrap: int, confidence: float,
            rng) -> MIEstimate:
    torch = _torch()
    xa, ya = as_columns(x, "x"), as_columns(y, "y")
    bootstrap, confidence = check_interval_options(bootstrap, confidence)
    hidden = check_int(hidden, "hidden", low=1)
    steps = check_int(steps, "steps", low=1)
    batch_size = check_int(batch_size, "batch_size", low=2)
    lr = check_positive(lr, "lr")
    ema = check_probability(ema, "ema", low_open=True)
    holdout = check_probability(holdout, "holdout", low_open=True, high_open=True)
    max_eval = check_int(max_eval, "max_eval", low=2)
    n = check_pair(xa, ya, min_rows=8)
    check_not_constant(xa, "x")
    check_not_constant(ya, "y")
    rng = check_rng(rng)
    order = rng.permutation(n)
    n_eval = min(max_eval, max(2, int(round(holdout * n))))
    batch_size = min(batch_size, n - n_eval)
    z = np.hstack([standardize(xa), standardize(ya)])[order]
    dx = xa.shape[1]
    train = torch.from_numpy(z[n_eval:]).float()
    evaluation = torch.from_numpy(z[:n_eval]).float()
    seed = int(rng.integers(0, 2 ** 62))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        critic = _critic(torch, z.shape[1], hidden)
        opt = torch.optim.Adam(critic.parameters(), lr=lr)
        moving = None
        for _ in range(steps):
            idx = torch.randint(0, train.shape[0], (batch_size,))
            s = _pair_scores(torch, critic, train[idx, :dx], train[idx, dx:])
            diag = torch.diagonal(s)
            if objective == "mine":
                marg = torch.exp(_offdiag(torch, s)).mean()
                batch_mean = marg.detach()
                moving = batch_mean if moving is None else (1 - ema) * moving + ema * batch_mean
                loss = -(diag.mean() - marg / moving)
            else:
                loss = -(diag - torch.logsumexp(s, dim=1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            scores = _pair_scores(torch, critic, evaluation[:, :dx], evaluation[:, dx:])
        scores = scores.double().numpy()
    terms = _row_terms(scores)
    value = _bound(objective, terms, np.arange(n_eval))
    if bootstrap:
        reps = [_bound(objective, terms, rng.integers(0, n_eval, n_eval))
                for _ in range(bootstrap)]
        tail = (1.0 - confidence) / 2.0
        lo, hi = (float(q) for q in np.quantile(reps, [tail, 1.0 - tail]))
    else:
        lo = hi = math.nan
    if objective == "mine":
        return MIEstimate(value, lo, hi, confidence, "mine", n, MINE_BIAS)
    return MIEstimate(value, lo, hi, confidence,
                      f"infonce(ceiling log {n_eval} = {math.log(n_eval):.3f})", n,
                      INFONCE_BIAS)


def mine(x, y, *, hidden: int = 64, steps: int = 1000, batch_size: int = 128, lr: float = 1e-3,
         ema: float = 0.01, holdout: float = 0.3, max_eval: int = 1000, bootstrap: int = 100,
         confidence: float = 0.95, rng=None) -> MIEstimate:
    """MINE estimate of I(X; Y) in nats (Donsker–Varadhan bound, moving-average gradient)."""
    return _neural(x, y, objective="mine", hidden=hidden, steps=steps, batch_size=batch_size,
                   lr=lr, ema=ema, holdout=holdout, max_eval=max_eval, bootstrap=bootstrap,
                   confidence=confidence, rng=rng)


def infonce(x, y, *, hidden: int = 64, steps: int = 1000, batch_size: int = 128,
            lr: float = 1e-3, holdout: float = 0.3, max_eval: int = 1000,
            bootstrap: int = 100, confidence: float = 0.95, rng=None) -> MIEstimate:
    """InfoNCE estimate of I(X; Y) in nats; saturates at log(evaluation rows)."""
    return _neural(x, y, objective="infonce", hidden=hidden, steps=steps,
                   batch_size=batch_size, lr=lr, ema=0.01, holdout=holdout, max_eval=max_eval,
                   bootstrap=bootstrap, confidence=confidence, rng=rng)
