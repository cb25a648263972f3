"""The default Ledger is a valid privacy filter; planned schedules stay PLD-tight."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy import integrate, special, stats

from veil.dp import Gaussian, Ledger
from veil.dp.accounting import PLDAccountant, calibrate_noise, epsilon_for
from veil.errors import BudgetExceededError, ConfigError


def _gaussian_profile(mu: float, e: float) -> float:
    """delta(e) of the Gaussian mechanism with mu = sensitivity / sigma, any real e
    (Balle & Wang 2018): Phi(mu/2 - e/mu) - e^e Phi(-mu/2 - e/mu)."""
    return float(special.ndtr(mu / 2 - e / mu) - math.exp(e) * special.ndtr(-mu / 2 - e / mu))


def _laplace_profile(b: float, e: float) -> float:
    """delta(e) = E_p[(1 - e^(e - L))_+] for p = Lap(0, b), q = Lap(1, b), any real e: the
    loss L is 1/b for y <= 0, -1/b for y >= 1 and (1 - 2y)/b between."""
    y = min(1.0, max(0.0, (1.0 - e * b) / 2))  # the middle part counts for y < y*
    middle = 0.5 * (-math.expm1(-y / b)) - 0.5 * math.exp(e - 1 / b) * math.expm1(y / b)
    return (0.5 * max(0.0, -math.expm1(e - 1 / b)) + middle
            + 0.5 * math.exp(-1 / b) * max(0.0, -math.expm1(e + 1 / b)))


def _least_noise(ledger: Ledger, event_for, delta: float) -> float:
    """The smallest noise parameter whose event the ledger admits now (bisection)."""
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ledger.fits(event_for(mid), delta=delta) else (mid, hi)
    return hi


def _adaptive_delta(ledger: Ledger, epsilon: float) -> float:
    """Realised delta at ``epsilon`` of two releases on Ledger(1, 1e-3), the second chosen
    from the first's output: a Gaussian first release (epsilon 0.5, delta 5e-4); then, of
    the two second releases the ledger admits (the least-noise Gaussian and the
    least-noise Laplace), whichever leaks more given the first output."""
    first = Gaussian(epsilon=0.5, delta=5e-4, sensitivity=1.0)
    ledger.release(first, 0.0, rng=0)
    left = 1e-3 - 5e-4
    sigma = _least_noise(ledger, dpa.GaussianDpEvent, left)
    b = _least_noise(ledger, dpa.LaplaceDpEvent, left)
    mu1 = 1.0 / first.event.noise_multiplier
    # the first release's privacy loss is N(mu1^2/2, mu1^2) under the first dataset;
    # the adaptive analyst picks the second release with the larger profile at eps - L1
    grid = np.linspace(mu1 * mu1 / 2 - 9 * mu1, mu1 * mu1 / 2 + 9 * mu1, 801)
    worst = [max(_gaussian_profile(1.0 / sigma, epsilon - loss),
                 _laplace_profile(b, epsilon - loss)) for loss in grid]
    density = stats.norm(mu1 * mu1 / 2, mu1).pdf(grid)
    return float(integrate.trapezoid(density * np.array(worst), grid))


def test_the_adaptive_two_step_example_stays_within_the_budget():
    # plain PLD composition (not a filter) admits second releases that the adaptive
    # analyst combines into a realised delta above the budget
    assert _adaptive_delta(Ledger(1.0, 1e-3, accountant="pld-nonadaptive"), 1.0) > 1.2e-3
    # the default ledger is a filter: the budget holds whatever the analyst chooses
    assert _adaptive_delta(Ledger(1.0, 1e-3), 1.0) <= 1e-3 * (1 + 1e-3)
