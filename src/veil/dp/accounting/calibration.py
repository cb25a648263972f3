"""Noise calibration: the smallest noise multiplier that meets an (epsilon, delta) target.

``epsilon_for(sigma, delta, sample_rate, steps)`` composes ``steps`` Gaussian steps with
noise multiplier ``sigma`` on batches sampled at ``sample_rate`` (Poisson, or fixed-size
without replacement) and returns the certified epsilon at ``delta``.

``calibrate_noise`` inverts it. epsilon is non-increasing in sigma, so a bisection on
log(sigma) keeps a bracket ``[lo, hi]`` where ``hi`` always meets the target and stops
when ``hi / lo - 1 <= rtol``; ``hi`` is returned, so the answer is verified by the very
accountant that will be charged, and at most ``rtol`` larger than needed. Probes are
placed by a safeguarded secant step (log epsilon is nearly linear in log sigma), so a
calibration takes about five evaluations. The search starts from the GDP central-limit
approximation (Bu et al. 2020), used only as a starting point.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from dp_accounting import dp_event as de

from veil._validation import (
    check_choice,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
)
from veil.dp.accounting.events import subsampled_gaussian_event
from veil.dp.accounting.gdp import GDPAccountant
from veil.dp.accounting.registry import DEFAULT_ACCOUNTANT, make_accountant
from veil.errors import ConfigError

__all__ = ["epsilon_for", "calibrate_noise", "calibrate"]

logger = logging.getLogger(__name__)

_SIGMA_MIN = 1e-2
_SIGMA_MAX = 1e5
#: the largest target epsilon calibration accepts: its time grows with the target (100 steps
#: at q = 0.01: epsilon 100 in 5 CPU-s, 400 in 12, 1,000 in 23; 1e30 never finished), and
#: beyond it the noise is a small fraction of the sensitivity (sigma 0.06 at 1,000). Local
#: DP and audits of weak budgets use targets in the hundreds.
MAX_CALIBRATION_EPSILON = 1000.0
#: the most noisy steps one calibration or epsilon_for composes (DP-SGD's longest runs are
#: ~1e6 steps; 1e9 did not finish)
MAX_STEPS = 10**7


def _check_target(epsilon: float) -> float:
    epsilon = check_epsilon(epsilon)
    if epsilon > MAX_CALIBRATION_EPSILON:
        raise ConfigError(f"epsilon={epsilon:g} is not allowed for calibration: at most "
                          f"{MAX_CALIBRATION_EPSILON:g} (such a budget protects nothing; "
                          "a noise multiplier can be given directly)")
    return epsilon


def _check_sampling(sample_rate: float, steps: int, sampling: str,
                    dataset_size: int | None) -> tuple[float, int]:
    q = check_probability(sample_rate, "sample_rate", low_open=True)
    steps = check_int(steps, "steps", low=1, high=MAX_STEPS)
    check_choice(sampling, "sampling", ("poisson", "without_replacement"))
    if dataset_size is not None:
        check_int(dataset_size, "dataset_size", low=1)
    return q, steps


def _steps_epsilon(sigma: float, delta: float, q: float, steps: int, accountant: str,
                   sampling: str, dataset_size: int | None, options: dict[str, Any],
                   certified_only: bool = True) -> float:
    acc = make_accountant(accountant, certified_only=certified_only, **options)
    step = subsampled_gaussian_event(sigma, q, sampling=sampling, dataset_size=dataset_size)
    # basic: each step gets delta/T; advanced: delta/(2T), leaving delta/2 for delta'
    share = {"basic": delta / steps, "advanced": delta / (2 * steps)}.get(accountant)
    try:
        acc.compose(step, delta=share or None, count=steps)
        return acc.get_epsilon(delta)
    except MemoryError:  # PLD's grid for millions of steps at extreme sigma
        raise ConfigError(f"steps={steps} at noise multiplier {sigma:.4g} is too large for "
                          f"the {accountant!r} accountant's memory; use accountant='rdp' "
                          "(or fewer steps)") from None


def epsilon_for(sigma: float, delta: float, sample_rate: float = 1.0, steps: int = 1,
                accountant: str = DEFAULT_ACCOUNTANT, *, sampling: str = "poisson",
                dataset_size: int | None = None, **options: Any) -> float:
    """Epsilon at ``delta`` of ``steps`` subsampled Gaussian steps with multiplier ``sigma``.

    ``accountant``: "rdp", "pld", "basic" (each step (eps_s, delta/T)-DP, eps_s from the
    step's PLD), "advanced" (each step at delta/(2T), delta' = delta/2), or "gdp" -- a CLT
    *approximation* that may under-state epsilon, logged as such. ``options`` go to the
    accountant (e.g. ``value_discretization_interval`` for PLD).
    """
    sigma = check_positive(sigma, "sigma")
    delta = check_delta(delta)
    q, steps = _check_sampling(sample_rate, steps, sampling, dataset_size)
    if accountant == "gdp":
        logger.warning("accountant='gdp' is a central-limit approximation, not a certified "
                       "upper bound: do not use it to decide a budget")
    return _steps_epsilon(sigma, delta, q, steps, accountant, sampling, dataset_size, options,
                          certified_only=False)


def _bracket(eps_of: Callable[[float], float], target: float,
             start: float) -> tuple[float, float, float, float] | None:
    """(lo, eps(lo), hi, eps(hi)) with eps(hi) <= target < eps(lo), searching from ``start``.

    Steps go the way the target lies: first by a factor 1.1, then to 2% beyond the root
    extrapolated through the last two points (log epsilon against log scale), never by
    less than 1.1 nor more than the fallback factor, which squares after every miss. None
    if even the smallest scale meets the target.
    """
    x, e = start, eps_of(start)
    prev: tuple[float, float] | None = None
    factor = 1.1
    up = e > target
    while True:
        step = factor
        if prev is not None and 0 < e < math.inf and 0 < prev[1] < math.inf and e != prev[1]:
            slope = math.log(e / prev[1]) / math.log(x / prev[0])
            if slope < 0:  # log(guess / x), signed so that it is > 0 in the search direction
                jump = math.log(target / e) / slope * (1 if up else -1)
                step = math.exp(min(max(jump + math.log(1.02), math.log(1.1)),
                                    math.log(factor)))
        if up and x >= _SIGMA_MAX:
            raise ConfigError(f"the target epsilon={target:g} is unreachable: even a scale of "
                              f"{x:g} spends epsilon={e:.6g}; raise epsilon or delta, or "
                              "lower sample_rate or steps")
        if not up and x <= _SIGMA_MIN:
            return None
        nxt = min(x * step, _SIGMA_MAX) if up else max(x / step, _SIGMA_MIN)
        prev, (x, e) = (x, e), (nxt, eps_of(nxt))
        if (e > target) != up:  # crossed the target
            (lo, e_lo), (hi, e_hi) = ((prev, (x, e)) if up else ((x, e), prev))
            return lo, e_lo, hi, e_hi
        factor *= factor


def _guess(event_for: Callable[[float], de.DpEvent], epsilon: float, delta: float) -> float:
    """A starting scale from the GDP central-limit approximation (closed form, cheap).

    Only a starting point: every scale returned by calibration is checked by the
    certified accountant. 1.0 when the approximation does not apply.
    """
    def approx(scale: float) -> float:
        acc = GDPAccountant()
        acc.compose(event_for(scale))
        return acc.get_epsilon(delta)

    try:
        lo, hi = _SIGMA_MIN, _SIGMA_MAX
        if approx(hi) > epsilon or approx(lo) <= epsilon:
            return 1.0
        while hi / lo > 1.01:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if approx(mid) <= epsilon else (mid, hi)
        return hi
    except ConfigError:
        return 1.0


def _refine(eps_of: Callable[[float], float], target: float,
            bracket: tuple[float, float, float, float], rtol: float) -> float:
    """Shrink the bracket to ``hi / lo <= 1 + rtol``; return ``hi`` (it meets the target).

    Safeguarded secant on (log scale, log epsilon), which is nearly linear for Gaussian
    noise: probe just above the estimated root, and if it meets the target, just below it,
    so that a good estimate closes the bracket in two evaluations. Every probe stays at
    least 5% of the bracket inside it (log scale), so the bracket always shrinks.
    """
    lo, e_lo, hi, e_hi = bracket
    margin = math.log1p(rtol) / 2.0
    while hi / lo - 1.0 > rtol:
        x_lo, x_hi = math.log(lo), math.log(hi)
        x = (x_lo + x_hi) / 2.0
        if math.isfinite(e_lo) and e_hi > 0:
            y_lo, y_hi = math.log(e_lo / target), math.log(e_hi / target)
            x = x_lo + (x_hi - x_lo) * y_lo / (y_lo - y_hi)
        inner = 0.05 * (x_hi - x_lo)
        for probe in (x + margin, x - margin):
            s = math.exp(min(max(probe, x_lo + inner), x_hi - inner))
            e = eps_of(s)
            if e <= target:
                hi, e_hi = s, e
            else:
                lo, e_lo = s, e
                break
            if hi / lo - 1.0 <= rtol:
                break
    return hi


def _solve(eps_of: Callable[[float], float], epsilon: float, guess: float,
           rtol: float) -> float:
    bracket = _bracket(eps_of, epsilon, guess)
    if bracket is None:
        logger.info("every scale >= %g meets the target", _SIGMA_MIN)
        return _SIGMA_MIN
    return _refine(eps_of, epsilon, bracket, rtol)


def calibrate(event_for: Callable[[float], de.DpEvent], epsilon: float, delta: float,
              accountant: str = DEFAULT_ACCOUNTANT, *, rtol: float = 1e-3,
              guess: float | None = None,
              **options: Any) -> float:
    """The smallest scale ``s`` (to ``rtol``) whose event ``event_for(s)`` is
    (epsilon, delta)-DP under ``accountant``; the cost must be non-increasing in ``s``.
    ``guess``: where the search starts (default: the GDP approximation's scale).

    The returned scale is verified (it met the target when evaluated). Raises ConfigError
    when no scale up to 1e5 meets the target.
    """
    epsilon = _check_target(epsilon)
    delta = check_delta(delta)
    rtol = check_positive(rtol, "rtol")
    make_accountant(accountant, **options)  # reject approximations and bad options early

    def eps_of(scale: float) -> float:
        acc = make_accountant(accountant, **options)
        acc.compose(event_for(scale))
        return acc.get_epsilon(delta)

    start = _guess(event_for, epsilon, delta) if guess is None else check_positive(guess,
                                                                                  "guess")
    return _solve(eps_of, epsilon, start, rtol)


def calibrate_noise(epsilon: float, delta: float, sample_rate: float = 1.0, steps: int = 1,
                    accountant: str = DEFAULT_ACCOUNTANT, *, sampling: str = "poisson",
                    dataset_size: int | None = None, rtol: float = 1e-3,
                    **options: Any) -> float:
    """The noise multiplier sigma for which ``steps`` subsampled Gaussian steps are
    (epsilon, delta)-DP under ``accountant`` (as :func:`epsilon_for` composes them;
    verified; at most ``rtol`` above the minimum).

    Raises ConfigError for an unreachable target (e.g. ``delta=0`` with Gaussian noise).
    """
    epsilon = _check_target(epsilon)
    q, steps = _check_sampling(sample_rate, steps, sampling, dataset_size)
    rtol = check_positive(rtol, "rtol")
    if check_delta(delta) == 0:
        raise ConfigError("delta=0 is not allowed for calibration: Gaussian noise never gives "
                          "pure DP; use delta > 0 (or a Laplace mechanism)")
    make_accountant(accountant, **options)  # reject approximations and bad options early

    def eps_of(sigma: float) -> float:
        return _steps_epsilon(sigma, delta, q, steps, accountant, sampling, dataset_size,
                              options)

    def event_for(sigma: float) -> de.DpEvent:
        return subsampled_gaussian_event(sigma, q, steps, sampling=sampling,
                                         dataset_size=dataset_size)

    return _solve(eps_of, epsilon, _guess(event_for, epsilon, delta), rtol)
