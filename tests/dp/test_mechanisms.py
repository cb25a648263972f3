"""Mechanisms: calibration, events, distributions (fixed seeds, tolerances from theory)."""

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event as de

from veil.dp import (
    AboveThreshold,
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Laplace,
    Ledger,
    RandomizedResponse,
    ReportNoisyMax,
    SparseVector,
    pure_dp_event,
)
from veil.dp.accounting import make_accountant
from veil.dp.accounting.rdp import DEFAULT_ORDERS
from veil.dp.gaussian import (
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    gaussian_delta,
    zcdp_rho,
)
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.random import Generator


def test_laplace_calibration_event_and_variance():
    mech = Laplace(epsilon=0.5, sensitivity=2.0)
    assert mech.scale * 0.5 >= 2.0 and mech.scale == pytest.approx(4.0)
    assert isinstance(mech.event, de.LaplaceDpEvent)
    assert mech.event.noise_multiplier * 2.0 <= mech.scale
    assert mech.scale / 2048 < mech.grid <= mech.scale / 1024
    # Var(Lap(b)) = 2 b^2; the sample variance of n draws has sd sqrt(20 b^4 / n)
    n, b = 400_000, mech.scale
    out = mech._randomize(np.full(n, 10.0), Generator(1)) - 10.0
    assert abs(out.var() - 2 * b * b) < 5 * math.sqrt(20 * b ** 4 / n)
    assert np.array_equal(out / mech.grid, np.round(out / mech.grid))
    assert isinstance(mech._randomize(3.0, Generator(1)), float)


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-5), (1.0, 1e-6), (4.0, 1e-9), (20.0, 1e-3)])
def test_analytic_gaussian_is_exact_and_tight(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta, 1.0)

    def delta_hp(s):  # Balle & Wang (2018) Thm. 8, evaluated at 50 digits
        with mpmath.workdps(50):
            a, b = 1 / (2 * mpmath.mpf(s)), eps * mpmath.mpf(s)
            return mpmath.ncdf(a - b) - mpmath.exp(eps) * mpmath.ncdf(-a - b)

    assert delta_hp(sigma) <= delta
    assert delta_hp(sigma * (1 - 1e-7)) > delta  # the smallest such sigma (to 1e-7)
    assert gaussian_delta(sigma, eps) <= delta
    assert dp_accounting.get_epsilon_gaussian(sigma, delta) <= eps * (1 + 1e-9)


def test_gaussian_calibrations_and_variance():
    analytic = Gaussian(0.5, 1e-5, sensitivity=3.0)
    classical = Gaussian(0.5, 1e-5, sensitivity=3.0, calibration="classical")
    assert classical.sigma == pytest.approx(math.sqrt(2 * math.log(1.25e5)) * 3 / 0.5, rel=1e-9)
    assert analytic.sigma < classical.sigma
    assert analytic.event == de.GaussianDpEvent(analytic.event.noise_multiplier)
    assert analytic.event.noise_multiplier * 3.0 <= analytic.sigma
    n, s = 400_000, analytic.sigma
    out = analytic._randomize(np.zeros(n), Generator(2))
    assert abs(out.var() - s * s) < 5 * math.sqrt(2 * s ** 4 / n)
    with pytest.raises(ConfigError, match="epsilon < 1"):
        Gaussian(1.5, 1e-5, calibration="classical")
    with pytest.raises(ConfigError, match="delta=0"):
        Gaussian(1.0, 0.0)
    with pytest.raises(ConfigError, match="calibration"):
        Gaussian(1.0, 1e-5, calibration="loose")
    assert classical_gaussian_sigma(0.9, 1e-5) > analytic_gaussian_sigma(0.9, 1e-5)


@pytest.mark.parametrize("make", [
    lambda: Laplace(0.0), lambda: Laplace(1.0, 1e-5), lambda: Laplace(1.0, sensitivity=-1),
    lambda: Gaussian(-1, 1e-5), lambda: Gaussian(1.0, 1.0), lambda: DiscreteLaplace(1.0, 0, 1.5),
    lambda: Exponential(float("inf")), lambda: RandomizedResponse(1.0, 1),
    lambda: RandomizedResponse(1.0, ["a", "a"]), lambda: AboveThreshold(1.0, float("nan")),
])
def test_bad_parameters(make):
    with pytest.raises(ConfigError):
        make()


def test_bad_values_are_data_errors():
    with pytest.raises(DataError):
        Laplace(1.0).check([1.0, float("nan")])
    with pytest.raises(DataError, match="too large"):
        Gaussian(1.0, 1e-5).check(1e300)
    with pytest.raises(DataError, match="integer"):
        DiscreteLaplace(1.0).check(2.5)
    with pytest.raises(DataError, match="categories"):
        RandomizedResponse(1.0, ["a", "b"]).check(["a", "c"])


def test_discrete_laplace_mechanism():
    mech = DiscreteLaplace(epsilon=0.5, sensitivity=2)
    assert mech.event == de.DiscreteLaplaceDpEvent(mech.event.noise_parameter, 2)
    assert mech.event.noise_parameter * 2 >= 0.5 - 1e-15
    out = mech._randomize(np.full(200_000, 7), Generator(3))
    assert out.dtype == np.int64
    t = mech.scale  # variance of the two-sided geometric: 2 r / (1 - r)^2, r = exp(-1/t)
    r = math.exp(-1 / t)
    var = 2 * r / (1 - r) ** 2
    assert abs((out - 7).var() - var) < 0.05 * var
    assert isinstance(mech._randomize(3, Generator(3)), int)


def test_discrete_gaussian_mechanism():
    mech = DiscreteGaussian(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    rho = mech.rho
    # the certificate: CKS 2020 Prop. 12 at some order alpha of rho-zCDP's RDP curve
    alphas = np.array([a for a in DEFAULT_ORDERS if a > 1.01])
    assert np.min(alphas * rho + np.log1p(-1 / alphas) - np.log(1e-5 * alphas) / (alphas - 1)) \
        <= 1.0
    # tighter than Bun & Steinke's conversion, whose largest rho is below
    log_inv = math.log(1e5)
    assert (math.sqrt(log_inv + 1.0) - math.sqrt(log_inv)) ** 2 < 0.7 * rho
    assert mech.event == de.ZCDpEvent(rho)
    assert 1.0 / (2 * mech.sigma ** 2) <= rho  # sigma rounded up: true rho <= event rho
    out = mech._randomize(np.zeros(100_000, dtype=int), Generator(4))
    # Var(N_Z(0, sigma^2)) < sigma^2, and within 1e-8 of it for sigma >= 1 (CKS 2020)
    assert abs(out.var() - mech.sigma ** 2) < 5 * math.sqrt(2 / out.size) * mech.sigma ** 2
    ledger = Ledger(2.0, 1e-5, accountant="rdp")
    ledger.release(mech, 3, rng=4)
    assert 1.0 - 1e-9 <= ledger.spent()[0] <= 1.0  # certified at epsilon, not below


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 1.0, 4.0, 16.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_zcdp_rho_is_the_largest_rho_the_rdp_accountant_certifies(epsilon, delta):
    rho = zcdp_rho(epsilon, delta)
    log_inv = math.log(1 / delta)
    bun_steinke = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2
    assert rho >= bun_steinke * (1 - 1e-12)

    def certified(r):
        acc = make_accountant("rdp")
        acc.compose(de.ZCDpEvent(r))
        return acc.get_epsilon(delta)
    if rho > bun_steinke:  # the RDP conversion: exactly at epsilon, and no slack left
        assert epsilon * (1 - 1e-9) <= certified(rho) <= epsilon
        assert certified(rho * (1 + 1e-6)) > epsilon
    else:  # tiny epsilon at tiny delta: no order of the grid helps, Bun & Steinke holds
        assert rho + 2 * math.sqrt(rho * log_inv) <= epsilon


def test_exponential_mechanism_frequencies():
    u = np.array([1.0, 2.0, 4.0, 0.0])
    for monotone, factor in ((False, 2.0), (True, 1.0)):
        mech = Exponential(epsilon=1.0, sensitivity=1.0, monotone=monotone)
        assert mech.coef == pytest.approx(1.0 / factor)
        probs = np.exp(u / factor) / np.exp(u / factor).sum()
        assert np.allclose(mech.probabilities(u), probs)
        rng = Generator(5)
        n = 8000
        wins = np.bincount([mech._randomize(u, rng) for _ in range(n)], minlength=4)
        # each frequency within 5 binomial standard deviations
        assert np.all(np.abs(wins / n - probs) < 5 * np.sqrt(probs * (1 - probs) / n))
    assert isinstance(mech.event, de.RandomizedResponseDpEvent)


def test_pure_dp_event_is_epsilon():
    for eps in (0.01, 1.0, 7.0):
        e = pure_dp_event(eps)
        eps_event = math.log1p(2 * (1 - e.noise_parameter) / e.noise_parameter)
        assert eps <= eps_event <= eps * (1 + 1e-12)


def test_report_noisy_max():
    mech = ReportNoisyMax(epsilon=1.0, sensitivity=1.0)
    assert mech.scale == 2.0 and ReportNoisyMax(1.0, monotone=True).scale == 1.0
    rng = Generator(6)
    wins = np.array([mech._randomize([0.0, 1.0], rng) for _ in range(8000)])
    t = 0.5  # P(L0 - L1 < d / b) for d = 1, b = 2 (see test_samplers)
    p1 = 1 - math.exp(-t) * (1 + t / 2) / 2
    assert abs(wins.mean() - p1) < 5 * math.sqrt(p1 * (1 - p1) / wins.size)


def test_randomized_response_and_estimator():
    mech = RandomizedResponse(epsilon=1.0, categories=["a", "b", "c"])
    assert mech.keep_probability == pytest.approx(math.e / (math.e + 2), rel=1e-12)
    assert mech.event == de.RandomizedResponseDpEvent(mech.p, 3)
    assert math.log1p(3 * (1 - mech.p) / mech.p) <= 1.0
    truth = np.array(["a"] * 60_000 + ["b"] * 30_000 + ["c"] * 10_000)
    reports = mech._randomize(truth, Generator(7))
    est = mech.estimate(reports)
    # sd of each estimate: sqrt(n q (1 - q)) / (1 - p) with q the report frequency
    q = np.bincount(mech.check(reports), minlength=3) / truth.size
    sd = np.sqrt(truth.size * q * (1 - q)) / (1 - mech.p)
    assert np.all(np.abs(est - [60_000, 30_000, 10_000]) < 5 * sd)
    keep = np.mean(reports == truth)
    assert abs(keep - mech.keep_probability) < 5 * math.sqrt(0.25 / truth.size)
    ints = RandomizedResponse(2.0, 4)._randomize(np.array([0, 3, 2]), Generator(7))
    assert ints.dtype.kind == "i" and set(ints) <= {0, 1, 2, 3}


def test_above_threshold_batch_and_interactive():
    at = AboveThreshold(epsilon=1.0, threshold=100.0, sensitivity=1.0)
    assert at.lattice_sensitivity == math.ceil(1.0 / at.grid)
    # answers 300 noise scales below/above the threshold: decided with overwhelming probability
    far = 300 * 4 / 1.0
    assert at._randomize([100 - far, 100 - far, 100 + far, 100 - far], Generator(8)) == 2
    assert at._randomize([100 - far] * 5, Generator(8)) is None

    ledger = Ledger(1.5)
    svt = SparseVector(1.0, threshold=100.0, ledger=ledger, rng=9)
    assert ledger.history() == ()
    assert [svt.query(100 - far), svt.query(100 + far)] == [False, True]
    assert svt.halted and len(ledger.history()) == 1  # charged once, before the 1st answer
    with pytest.raises(ConfigError, match="halted"):
        svt.query(0.0)
    tight = SparseVector(1.0, threshold=100.0, ledger=Ledger(0.5), rng=9)
    with pytest.raises(BudgetExceededError):
        tight.query(100 + far)
    assert tight.answers == []
