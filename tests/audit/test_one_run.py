"""The one-run audit (Steinke, Nasr & Jagielski 2023): its p-value, soundness and limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from veil.audit import canaries_needed, one_run_epsilon_lower_bound, one_run_p_value
from veil.dp.accounting import calibrate_noise
from veil.errors import ConfigError, DataError
from veil.random import default_rng


def test_p_value_pure_dp_is_the_binomial_tail():
    for m, r, v, eps in [(100, 40, 30, 1.0), (1000, 100, 90, 2.0), (10, 10, 10, 0.0)]:
        q = math.exp(eps) / (1 + math.exp(eps))
        assert one_run_p_value(m, r, v, eps) == pytest.approx(binom.sf(v - 1, r, q))


def test_p_value_with_delta_matches_the_formula_term_by_term():
    m, r, v, eps, delta = 1000, 60, 50, 1.5, 1e-4
    q = 1 / (1 + math.exp(-eps))
    slack = max(sum(binom.pmf(j, r, q) for j in range(v - i, v)) / i for i in range(1, v + 1))
    expected = binom.sf(v - 1, r, q) + 2 * m * delta * slack
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ConfigError, match="v <= r <= m"):
        one_run_p_value(10, 5, 6, 1.0)


def randomized_response_canaries(m: int, epsilon: float, g):
    """Each canary's score is its inclusion bit passed through epsilon-DP randomized
    response: the one-run bound is tight for it as m grows (Steinke et al., section 7)."""
    included = g.random(m) < 0.5
    flip = g.random(m) < 1 / (1 + math.exp(epsilon))
    return (included ^ flip).astype(float), included


def test_one_run_is_tight_and_sound_for_randomized_response():
    g = default_rng(30)
    scores, included = randomized_response_canaries(10000, 2.0, g)
    bound = one_run_epsilon_lower_bound(scores, included, rng=1)
    assert 1.7 < bound.epsilon <= 2.0  # 10^4 canaries: within 15% of the truth
    assert bound.candidates > 1 and bound.guesses == bound.k_pos + bound.k_neg
    exceed = 0
    for _ in range(200):
        s, inc = randomized_response_canaries(2000, 2.0, g)
        exceed += one_run_epsilon_lower_bound(s, inc, rng=g).epsilon > 2.0
    assert exceed <= 18  # P[Binomial(200, 0.05) > 18] < 0.5%


def test_one_run_with_delta_is_sound_for_gaussian_canaries():
    # m canaries, each its own Gaussian mechanism on one coordinate (parallel composition:
    # the release is (epsilon, delta)-DP with respect to every canary).
    epsilon, delta, m = 2.0, 1e-5, 1000
    sigma = calibrate_noise(epsilon, delta, accountant="pld")
    g = default_rng(31)
    bounds = []
    for _ in range(50):
        included = g.random(m) < 0.5
        scores = included + sigma * g.standard_normal(m)
        bounds.append(one_run_epsilon_lower_bound(scores, included, delta=delta, rng=g).epsilon)
    assert max(bounds) <= epsilon
    assert np.mean(bounds) > 0.3  # it does detect the leak


def test_ties_do_not_leak_the_order_of_the_canaries():
    # All scores equal: nothing can be learned. Listing the included canaries first must not
    # turn into correct guesses (ties are ranked at random).
    included = np.r_[np.ones(500, bool), np.zeros(500, bool)]
    bound = one_run_epsilon_lower_bound(np.zeros(1000), included, rng=2)
    assert bound.epsilon < 0.5


def test_too_few_canaries_say_how_many_are_needed():
    need = canaries_needed()
    perfect = np.r_[np.ones(need // 2), np.zeros(need - need // 2)]
    assert one_run_epsilon_lower_bound(perfect, perfect.astype(bool), rng=1).epsilon > 0
    small = need - 1
    with pytest.raises(DataError, match=f"need at least {need}"):
        one_run_epsilon_lower_bound(np.ones(small), np.ones(small, bool))


def test_fixed_guesses_and_bad_inputs():
    g = default_rng(32)
    scores, included = randomized_response_canaries(2000, 3.0, g)
    fixed = one_run_epsilon_lower_bound(scores, included, guesses=(200, 200), rng=1)
    assert (fixed.k_pos, fixed.k_neg, fixed.candidates) == (200, 200, 1)
    with pytest.raises(ConfigError, match="guesses"):
        one_run_epsilon_lower_bound(scores, included, guesses="all")
    with pytest.raises(ConfigError, match="k_neg"):
        one_run_epsilon_lower_bound(scores, included, guesses=(1500, 1000))
    with pytest.raises(DataError, match="one inclusion flag"):
        one_run_epsilon_lower_bound(scores, included[:-1])
    with pytest.raises(DataError, match="booleans"):
        one_run_epsilon_lower_bound(scores, np.full(2000, 2))
