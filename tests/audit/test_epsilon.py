"""Clopper–Pearson audits: exact intervals, soundness against DP mechanisms, clear limits."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy.stats import beta, binom

from veil.audit import audit_samples_needed, clopper_pearson, epsilon_lower_bound
from veil.dp import Ledger
from veil.dp.accounting import calibrate_noise
from veil.errors import ConfigError, DataError
from veil.random import default_rng


@pytest.mark.parametrize("n", [1, 7, 50, 1000])
def test_clopper_pearson_matches_scipy_beta_quantiles(n):
    k = np.arange(n + 1)
    lo, hi = clopper_pearson(k, n, 0.95)
    with np.errstate(all="ignore"):
        ref_lo = np.where(k > 0, beta.ppf(0.025, k, n - k + 1), 0.0)
        ref_hi = np.where(k < n, beta.ppf(0.975, k + 1, n - k), 1.0)
    np.testing.assert_allclose(lo, ref_lo, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(hi, ref_hi, rtol=1e-10, atol=1e-14)
    # the defining property: each bound puts exactly alpha/2 in its binomial tail
    inner = (k > 0) & (k < n)
    np.testing.assert_allclose(binom.sf(k[inner] - 1, n, lo[inner]), 0.025, rtol=1e-6)
    np.testing.assert_allclose(binom.cdf(k[inner], n, hi[inner]), 0.025, rtol=1e-6)
    one_lo, one_hi = clopper_pearson(k, n, 0.95, side="lower")
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(one_lo, np.where(k > 0, beta.ppf(0.05, k, n - k + 1), 0.0),
                                   rtol=1e-10, atol=1e-14)
    assert np.all(one_hi == 1.0)


def test_clopper_pearson_rejects_bad_counts():
    with pytest.raises(ConfigError, match="successes"):
        clopper_pearson(5, 4)
    with pytest.raises(ConfigError, match="confidence"):
        clopper_pearson(1, 4, confidence=1.0)


def randomized_response_trials(epsilon: float, n: int, g) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the epsilon-DP randomized response on the target's bit (1 with, 0 without):
    the output equals the bit with probability e^eps / (1 + e^eps). The point estimate
    log(TPR / FPR) equals epsilon exactly, so only the confidence interval keeps an audit
    below it: a sharp test of soundness."""
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))
    with_target = (g.random(n) < keep).astype(float)
    without = (g.random(n) >= keep).astype(float)
    return with_target, without


def test_audit_of_pure_dp_mechanism_exceeds_epsilon_at_most_at_the_stated_rate():
    g = default_rng(20)
    epsilon, audits, exceed, bounds = 1.0, 200, 0, []
    for _ in range(audits):
        ins, outs = randomized_response_trials(epsilon, 4000, g)
        bound = epsilon_lower_bound(ins, outs, threshold=0.5, confidence=0.95)
        bounds.append(bound.epsilon)
        exceed += bound.epsilon > epsilon
    # P[Binomial(200, 0.05) > 18] < 0.5%: a sound audit stays below this count
    assert exceed <= 18
    # and it is close: the bound's mean is within 0.15 of the truth with 4000 trials
    assert np.mean(bounds) > epsilon - 0.15


def test_audit_of_gaussian_mechanism_never_exceeds_ledger_epsilon():
    # A DP sum of records in [0, 1] (sensitivity 1), noise calibrated and charged through
    # the Ledger; the attacker sees the output with and without a target record x = 1.
    epsilon, delta = 2.0, 1e-5
    sigma = calibrate_noise(epsilon, delta, accountant="pld")
    g = default_rng(21)
    exceed, best = 0, 0.0
    for _ in range(40):
        ledger = Ledger(epsilon, delta, accountant="pld")
        ledger.charge(dp_accounting.GaussianDpEvent(sigma))
        certified, _ = ledger.spent()
        outs = 10.0 + sigma * g.standard_normal(3000)
        ins = 11.0 + sigma * g.standard_normal(3000)
        bound = epsilon_lower_bound(ins, outs, delta=delta, rng=g)
        exceed += bound.epsilon > certified
        best = max(best, bound.epsilon)
        assert bound.max_certifiable > certified  # the audit had the resolution to exceed
    assert exceed <= 6  # P[Binomial(40, 0.05) > 6] < 1.5%
    assert best > 0.5  # and it measured real leakage


def test_non_private_release_gives_clearly_positive_bound():
    g = default_rng(22)
    ins = 1.0 + 0.01 * g.standard_normal(500)  # no noise to speak of: perfectly separable
    outs = 0.01 * g.standard_normal(500)
    bound = epsilon_lower_bound(ins, outs, rng=1)
    assert bound.epsilon > 0.95 * bound.max_certifiable  # the threshold comes from the other half
    assert bound.epsilon > 4.0
    assert bound.n_members == 250 and bound.method == "clopper-pearson/split"
    fixed = epsilon_lower_bound(ins, outs, threshold=0.5)
    assert fixed.n_members == 500 and fixed.epsilon > bound.epsilon


def test_too_few_trials_say_how_many_are_needed():
    need = audit_samples_needed(0.0, split=False)
    perfect = np.ones(need), np.zeros(need)
    assert epsilon_lower_bound(*perfect, threshold=0.5).epsilon > 0
    with pytest.raises(DataError, match=f"need at least {need} of each"):
        epsilon_lower_bound(np.ones(need - 1), np.zeros(need - 1), threshold=0.5)
    split_need = audit_samples_needed(0.0)
    with pytest.raises(DataError, match=f"need at least {split_need}"):
        epsilon_lower_bound(np.ones(split_need - 1), np.zeros(split_need - 1))
    # for a target epsilon: n per side lets a perfect attack certify it, n - 1 does not
    n4 = audit_samples_needed(4.0, delta=1e-5, split=False)
    top = epsilon_lower_bound(np.ones(n4), np.zeros(n4), delta=1e-5, threshold=0.5)
    below = epsilon_lower_bound(np.ones(n4 - 1), np.zeros(n4 - 1), delta=1e-5, threshold=0.5)
    assert below.epsilon < 4.0 <= top.epsilon


def test_bad_inputs():
    with pytest.raises(ConfigError, match="threshold"):
        epsilon_lower_bound(np.ones(50), np.zeros(50), threshold="best")
    with pytest.raises(DataError, match="member_scores"):
        epsilon_lower_bound([np.nan, 1.0], np.zeros(50))
    with pytest.raises(DataError, match="nonmember_scores is empty"):
        epsilon_lower_bound(np.ones(50), [])
    with pytest.raises(ConfigError, match="delta"):
        epsilon_lower_bound(np.ones(50), np.zeros(50), delta=1.5)
