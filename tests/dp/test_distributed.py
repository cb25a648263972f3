"""Distributed noise: per-party variance, any t shares sum to the central distribution, costs."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event as de
from scipy import stats

from veil.dp import Ledger
from veil.dp.accounting import RDPAccountant, SkellamDpEvent, event_from_json, event_to_json
from veil.dp.distributed import (
    DistributedGaussian,
    DistributedLaplace,
    DistributedSkellam,
    calibrate_multiplier,
    distributed_noise,
)
from veil.dp.gaussian import analytic_gaussian_sigma
from veil.dp.trust import Trust, check_trust
from veil.errors import ConfigError, DataError
from veil.random import Generator

N = 200_000


def _var_tolerance(var: float, mu4: float, n: int) -> float:
    """5 standard errors of the sample variance: sd = sqrt((mu4 - var^2) / n)."""
    return 5 * math.sqrt((mu4 - var * var) / n)


@pytest.mark.parametrize("t", [1, 3, 10])
def test_gaussian_share_variance_and_sum_of_t_shares(t):
    mech = DistributedGaussian(1.0, 1e-5, sensitivity=2.0, parties=10, honest=t)
    sigma = analytic_gaussian_sigma(1.0, 1e-5, 2.0)
    assert mech.sigma == pytest.approx(sigma)
    assert mech.share_variance == pytest.approx(sigma ** 2 / t)
    assert mech.event == de.GaussianDpEvent(mech.noise_multiplier)
    g = Generator(11)
    share = mech.share(N, g)
    v = sigma ** 2 / t    # normal: mu4 = 3 var^2
    assert abs(share.var() - v) < _var_tolerance(v, 3 * v * v, N)
    total = sum(mech.share(20_000, g) for _ in range(t))
    assert stats.kstest(total, stats.norm(scale=sigma).cdf).pvalue > 1e-3
    if t > 1:   # the test has power: half the shares are visibly too little noise
        short = sum(mech.share(20_000, g) for _ in range(t // 2))
        assert stats.kstest(short, stats.norm(scale=sigma).cdf).pvalue < 1e-6


@pytest.mark.parametrize("t", [1, 4, 10])
def test_laplace_gamma_shares_sum_to_laplace_exactly(t):
    mech = DistributedLaplace(0.5, sensitivity=3.0, parties=10, honest=t)
    b = 3.0 / 0.5
    assert mech.scale == pytest.approx(b) and mech.delta == 0
    assert mech.event == de.LaplaceDpEvent(1 / 0.5)
    g = Generator(5)
    share = mech.share(N, g)
    # share = G1 - G2, G ~ Gamma(k=1/t, b): cumulants k2 = 2 k b^2, k4 = 12 k b^4
    k = 1 / t
    v = 2 * k * b * b
    mu4 = 12 * k * b ** 4 + 3 * v * v
    assert mech.share_variance == pytest.approx(v)
    assert abs(share.var() - v) < _var_tolerance(v, mu4, N)
    total = sum(mech.share(20_000, g) for _ in range(t))
    assert stats.kstest(total, stats.laplace(scale=b).cdf).pvalue > 1e-3
    if t > 1:
        short = sum(mech.share(20_000, g) for _ in range(t // 2))
        assert stats.kstest(short, stats.laplace(scale=b).cdf).pvalue < 1e-6


@pytest.mark.parametrize("t", [1, 5])
def test_skellam_shares_are_integers_and_sum_to_skellam(t):
    mech = DistributedSkellam(noise_multiplier=4.0, delta=1e-5, l2_sensitivity=2.0,
                              parties=10, honest=t)
    mu = (4.0 * 2.0) ** 2
    assert mech.variance == pytest.approx(mu) and mech.share_variance == pytest.approx(mu / t)
    assert mech.event == SkellamDpEvent(mu, 4.0, 2.0)     # L1 defaults to L2^2
    g = Generator(7)
    share = mech.share(N, g)
    assert share.dtype == np.int64
    lam = mu / (2 * t)    # Poisson difference: k2 = 2 lam, k4 = 2 lam
    v = 2 * lam
    assert abs(share.var() - v) < _var_tolerance(v, 2 * lam + 3 * v * v, N)
    total = sum(mech.share(50_000, g) for _ in range(t))
    # chi-square against the Skellam pmf on the central +-3.5 sd, tails pooled
    lo, hi = -int(3.5 * math.sqrt(mu)), int(3.5 * math.sqrt(mu))
    edges = np.arange(lo, hi + 2) - 0.5   # one bin per integer lo..hi
    observed = np.array([np.sum(total < lo), *np.histogram(total, edges)[0], np.sum(total > hi)])
    dist = stats.skellam(mu / 2, mu / 2)
    probs = np.array([dist.cdf(lo - 1), *dist.pmf(np.arange(lo, hi + 1)), dist.sf(hi)])
    chi2 = stats.chisquare(observed, probs / probs.sum() * total.size)
    assert chi2.pvalue > 1e-3
    assert mech.tail_bound(64) > 12 * math.sqrt(mech.share_variance)


def test_randomize_adds_all_parties_shares():
    mech = DistributedGaussian(noise_multiplier=2.0, sensitivity=1.0, delta=1e-5, parties=8,
                               honest=2)
    out = mech._randomize(np.full(N, 5.0), Generator(3)) - 5.0
    v = mech.aggregate_variance
    assert v == pytest.approx(8 * 4.0 / 2)
    assert abs(out.var() - v) < _var_tolerance(v, 3 * v * v, N)
    skellam = DistributedSkellam(noise_multiplier=1.0, delta=1e-5, l2_sensitivity=3.0,
                                 parties=4, honest=4)
    assert skellam._randomize(np.arange(3), Generator(1)).dtype == np.int64
    with pytest.raises(DataError):
        skellam._randomize(np.array([0.5]), Generator(1))


def test_t_equal_n_is_central_and_t_one_is_local():
    central = DistributedGaussian(1.0, 1e-5, parties=10, honest=10)
    local = DistributedGaussian(1.0, 1e-5, parties=10, honest=1)
    assert central.aggregate_variance == pytest.approx(central.sigma ** 2)
    assert local.share_variance == pytest.approx(local.sigma ** 2)
    assert local.aggregate_variance == pytest.approx(10 * local.sigma ** 2)
    assert central.event == local.event      # the same charge: central DP's cost


def test_calibration_of_one_release():
    mech = DistributedSkellam(1.0, 1e-5, l2_sensitivity=2 ** 10, parties=3, honest=2)
    assert mech.epsilon <= 1.0 + 1e-9
    acc = RDPAccountant()
    acc.compose(mech.event)
    assert acc.get_epsilon(1e-5) == pytest.approx(mech.epsilon)
    # a slightly smaller multiplier overspends: the calibration is tight (rtol 1e-4)
    acc = RDPAccountant()
    acc.compose(SkellamDpEvent((0.99 * mech.noise_multiplier * 2 ** 10) ** 2, 2 ** 20, 2 ** 10))
    assert acc.get_epsilon(1e-5) > 1.0
    given = DistributedGaussian(noise_multiplier=mech.noise_multiplier, delta=1e-5, parties=3,
                                honest=2)
    assert given.epsilon < mech.epsilon   # Skellam pays a little more than the Gaussian


@pytest.mark.parametrize("kind", ["gaussian", "skellam", "laplace"])
def test_calibrate_multiplier_fits_the_plan_exactly(kind):
    plan = [(4.0, 2.0)] * 3 + [(1.0, 1.0)] * 2
    delta = 0.0 if kind == "laplace" else 1e-5
    z = calibrate_multiplier(kind, 1.0, delta, plan, accountant="rdp" if kind != "laplace"
                             else "pld")
    if kind == "laplace":
        assert z == pytest.approx(5.0)
    ledger = Ledger(1.0, delta, accountant="rdp" if kind != "laplace" else "pld")
    mechs = [distributed_noise(kind, z, l1_sensitivity=l1, l2_sensitivity=l2, parties=5,
                               honest=2, delta=1e-5) for l1, l2 in plan]
    # the rounds are fixed in advance: one planned block (charged one by one, the "rdp"
    # filter would price them all at the order the first one fixes)
    ledger.plan([m.event for m in mechs], delta=delta or None)
    assert ledger.spent()[0] <= 1.0 * (1 + 1e-9)
    assert ledger.spent()[0] >= 0.99    # and nothing much is left unused


def test_skellam_event_round_trips_and_composes_in_a_ledger():
    e = SkellamDpEvent(1e4, 9.0, 3.0)
    assert event_from_json(event_to_json(e)) == e
    ledger = Ledger(10.0, 1e-6, accountant="rdp")  # many adaptive Skellam rounds: RDP
    ledger.charge(e)
    ledger.charge(e)
    acc = RDPAccountant()
    acc.compose(de.SelfComposedDpEvent(e, 2))
    assert ledger.spent()[0] == pytest.approx(acc.get_epsilon(1e-6))
    gauss = RDPAccountant()
    gauss.compose(de.SelfComposedDpEvent(de.GaussianDpEvent(math.sqrt(1e4) / 3.0), 2))
    assert gauss.get_epsilon(1e-6) < ledger.spent()[0] < 1.01 * gauss.get_epsilon(1e-6)


def test_bad_parameters_are_config_errors():
    with pytest.raises(ConfigError, match="t"):
        DistributedGaussian(1.0, 1e-5, parties=5, honest=6)
    with pytest.raises(ConfigError, match="t"):
        DistributedLaplace(1.0, parties=5, honest=0)
    with pytest.raises(ConfigError, match="epsilon"):
        DistributedLaplace(-1.0, parties=5, honest=1)
    with pytest.raises(ConfigError, match="exactly one"):
        DistributedGaussian(1.0, 1e-5, parties=5, honest=1, noise_multiplier=2.0)
    with pytest.raises(ConfigError, match="delta"):
        DistributedSkellam(1.0, 0.0, parties=5, honest=1)
    with pytest.raises(ConfigError, match="noise"):
        calibrate_multiplier("uniform", 1.0, 1e-5, [(1.0, 1.0)])
    with pytest.raises(ConfigError, match="delta"):
        calibrate_multiplier("gaussian", 1.0, 0.0, [(1.0, 1.0)])


def test_one_trust_value_names_t_once_and_derives_the_threshold():
    """t had six names and was validated five times on one path, n - t + 1 computed at five
    sites (issue #31). A Trust is validated once, derives the threshold and the colluders,
    and what takes one refuses a bare count instead of validating it again."""
    trust = Trust(10, 4)
    assert (trust.parties, trust.honest, trust.threshold, trust.colluding) == (10, 4, 7, 6)
    assert Trust(5, 5).threshold == 1 and Trust(5, 1).threshold == 5
    for parties, honest in ((5, 6), (5, 0), (0, 1)):
        with pytest.raises(ConfigError, match="is not allowed"):
            Trust(parties, honest)
    assert check_trust(trust, 10) is trust
    with pytest.raises(ConfigError, match=r"trust=4 is not allowed: expected .*Trust\(10, "):
        check_trust(4, 10)
    with pytest.raises(ConfigError, match=r"Trust\(parties=10, honest=4\) is not allowed"):
        check_trust(trust, 9)
    assert DistributedLaplace(1.0, parties=10, honest=4).trust == trust
