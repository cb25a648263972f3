"""Privacy-loss-distribution accounting through Google's dp_accounting.

The privacy loss of a mechanism between neighbouring inputs is a random variable; its
distribution (PLD) composes by convolution, and ``delta(eps) = E[(1 - e^(eps - L))_+]``
gives the tightest (epsilon, delta) of the composition (Meiser & Mohammadi 2018; Koskela,
Jalko & Honkela 2020; Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022).

Losses live on a grid of step ``value_discretization_interval``. veil builds every PLD
*pessimistically* (dp_accounting's ``pessimistic_estimate=True`` with the connect-the-dots
discretisation of Doroshenko et al. 2022): the discretised distribution dominates the
true one, so the reported epsilon is an upper bound whatever the grid; a coarser grid is
faster and only less tight. The Gaussian noise tails beyond probability
``exp(log_mass_truncation_bound)`` are not discretised: the lower tail is counted as an
infinite loss (it adds at most that mass to delta per step) and the upper tail is rounded
up, so truncation too only makes the bound more pessimistic. The defaults (interval
``3e-4``, tail ``e^-40``) keep the Abadi et al. MNIST setting within 0.001 of
dp_accounting's fine default (``1e-4``, ``e^-50``) at about a quarter of its cost.

Leaves: Gaussian, Laplace, discrete Laplace, randomized response (replace-one, see
:mod:`~veil.dp.accounting.events`), and Poisson-subsampled Gaussian (or a tree of
Gaussians on the same batch) or Laplace; any other pure eps-DP event — and a Laplace
event of epsilon above 10, whose discretised PLD would need millions of points — by the
two-point PLD of its randomized-response stand-in, in closed form (:func:`_pure_pld`).
A fixed-size batch arrives already rewritten by the coupling bound. A parallel composition
of identical events costs one of them; of different events, their sequential composition
(a sound over-estimate). An event with no PLD but an RDP curve (a zCDP event such as the
discrete Gaussian's, tree aggregation) switches the accountant to the RDP bound of the
whole composition (sound, less tight), and :attr:`PLDAccountant.uses_rdp_fallback` says
so.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from dp_accounting import dp_event as de
from dp_accounting import privacy_accountant as pa
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm

from veil.dp.accounting.base import Accountant
from veil.dp.accounting.events import describe
from veil.dp.accounting.guarantees import gaussian_noise_multiplier, pure_epsilon
from veil.dp.accounting.rdp import RDPAccountant
from veil.dp.accounting.traversal import cached_leaf, fold
from veil.errors import ConfigError

__all__ = ["PLDAccountant", "DEFAULT_INTERVAL"]

logger = logging.getLogger(__name__)

#: default grid step of the privacy loss (see the module docstring)
DEFAULT_INTERVAL = 3e-4
#: default ln of the noise mass cut from each tail (counted as infinite loss, i.e. delta)
DEFAULT_LOG_TAIL = -40.0

#: largest Laplace epsilon given its own discretised PLD (about 2 eps / interval points);
#: above it the two-point PLD of :func:`_pure_pld` costs microseconds and certifies at most
#: about 2 delta more epsilon than the Laplace PLD (3e-4 at delta = 1e-4; tested)
_LAPLACE_DIRECT = 10.0

PLD = pld_lib.PrivacyLossDistribution
_Adjacency = plm.AdjacencyType


class _GaussianLoss(plm.GaussianPrivacyLoss):
    """dp_accounting's (Poisson-subsampled) Gaussian privacy loss, with the hockey-stick
    divergence evaluated for a whole grid of epsilons at once.

    dp_accounting inverts the privacy loss one epsilon at a time in Python, which is most
    of the cost of building a PLD; here the same closed forms run on numpy arrays. For
    sampling rate q and privacy loss e, the loss of the unsampled mechanism is
    ``log(1 + (e^e - 1)/q)`` (remove) or ``-log(1 + (e^-e - 1)/q)`` (add), and the
    Gaussian's inverse is linear in it. ``delta(e) = mu_upper_cdf(x) - e^e mu_lower_cdf(x)``
    at ``x = inverse(e)`` (dp_accounting's ``get_delta_for_epsilon``, same edge cases).
    """

    def _inverse(self, loss: np.ndarray) -> np.ndarray:
        q = self.sampling_prob
        if self.adjacency_type == _Adjacency.REMOVE:
            if q < 1.0:
                with np.errstate(divide="ignore"):
                    loss = loss - math.log(q) + np.log1p(-(1.0 - q) * np.exp(-loss))
            return self._inverse_privacy_loss_without_subsampling_remove(loss)
        if q < 1.0:
            with np.errstate(divide="ignore"):
                loss = loss + math.log(q) - np.log1p(-(1.0 - q) * np.exp(loss))
        return self._inverse_privacy_loss_without_subsampling_add(loss)

    def get_delta_for_epsilon(self, epsilon):  # noqa: ANN001, ANN201 (dp_accounting's API)
        eps = np.atleast_1d(np.asarray(epsilon, dtype=np.float64))
        deltas = np.zeros_like(eps)
        q = self.sampling_prob
        if q == 1.0:
            inside = np.ones_like(eps, dtype=bool)
        elif self.adjacency_type == _Adjacency.ADD:
            inside = eps < -math.log1p(-q)  # beyond: the divergence is 0
        else:
            inside = eps > math.log1p(-q)
            deltas[~inside] = -np.expm1(eps[~inside])
        x = self._inverse(eps[inside])
        deltas[inside] = (self.mu_upper_cdf(x)
                          - np.exp(eps[inside] + self.mu_lower_log_cdf(x)))
        deltas = np.clip(deltas, 0.0, 1.0)
        return float(deltas[0]) if np.ndim(epsilon) == 0 else deltas


#: the largest loss index on a PLD's grid: indices are exact integers in a float up to 2**53
_MAX_GRID_INDEX = 2.0**53


def _pure_pld(epsilon: float, interval: float) -> PLD:
    """The PLD of binary randomized response with odds e^eps, in closed form.

    Every eps-DP mechanism is a post-processing of this randomized response on any
    neighbouring pair (Kairouz, Oh & Viswanath 2015), so it prices any pure eps-DP event
    soundly: loss +eps with probability 1 / (1 + e^-eps), -eps with e^-eps / (1 + e^-eps)
    (written with e^-eps so that no epsilon overflows), rounded up onto the grid.
    """
    if not epsilon / interval < _MAX_GRID_INDEX:
        raise ConfigError(f"epsilon={epsilon:g} of a pure-DP event is beyond the PLD "
                          f"accountant's grid (at most {_MAX_GRID_INDEX * interval:g} at its "
                          f"discretization interval {interval:g})")
    tail = math.exp(-epsilon)
    return PLD.create_from_rounded_probability(
        {math.ceil(epsilon / interval): 1.0 / (1.0 + tail),
         math.ceil(-epsilon / interval): tail / (1.0 + tail)}, 0.0, interval)


def _gaussian_pld(sigma: float, q: float, interval: float, log_tail: float) -> PLD:
    """Pessimistic connect-the-dots PLD of a (Poisson-subsampled) Gaussian.

    The same construction as ``from_gaussian_mechanism`` (Doroshenko et al. 2022): the
    hockey-stick curve on the grid of epsilons between the truncation points, turned
    into a dominating PMF by dp_accounting's ``create_pmf_pessimistic_connect_dots_fixed_gap``.
    """
    def pmf(adjacency: plm.AdjacencyType) -> pld_pmf.PLDPmf:
        loss = _GaussianLoss(sigma, sensitivity=1.0, pessimistic_estimate=True,
                             log_mass_truncation_bound=log_tail, sampling_prob=q,
                             adjacency_type=adjacency)
        bounds = loss.connect_dots_bounds()
        lower = math.floor(bounds.epsilon_lower / interval)
        upper = math.ceil(bounds.epsilon_upper / interval)
        deltas = loss.get_delta_for_epsilon(np.arange(lower, upper + 1) * interval)
        return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(interval, lower, upper,
                                                                     deltas)

    remove = pmf(_Adjacency.REMOVE)
    return PLD(remove) if q == 1.0 else PLD(remove, pmf(_Adjacency.ADD))


class _Plds:
    """The PLD algebra; ``None`` stands for a non-private (infinite) loss."""

    def __init__(self, interval: float, log_tail: float) -> None:
        self.interval = interval
        self.log_tail = log_tail
        self._identity = pld_lib.identity(value_discretization_interval=interval)

    def zero(self) -> PLD | None:
        return self._identity

    def non_private(self) -> PLD | None:
        return None

    @cached_leaf
    def leaf(self, event: de.DpEvent) -> PLD | None:
        step = self.interval
        if isinstance(event, de.GaussianDpEvent):
            if event.noise_multiplier == 0:
                return None
            return _gaussian_pld(event.noise_multiplier, 1.0, step, self.log_tail)
        if isinstance(event, de.LaplaceDpEvent):
            if event.noise_multiplier == 0:
                return None
            if 1.0 / event.noise_multiplier > _LAPLACE_DIRECT:
                return _pure_pld(1.0 / event.noise_multiplier, step)
            return pld_lib.from_laplace_mechanism(
                event.noise_multiplier, value_discretization_interval=step)
        if isinstance(event, de.DiscreteLaplaceDpEvent):
            if event.sensitivity == 0:
                return self.zero()
            if event.noise_parameter == 0:
                return None
            return pld_lib.from_discrete_laplace_mechanism(
                event.noise_parameter, sensitivity=event.sensitivity,
                value_discretization_interval=step)
        if isinstance(event, de.RandomizedResponseDpEvent):
            if event.num_buckets == 1 or event.noise_parameter == 1.0:
                return self.zero()
            if event.noise_parameter == 0:
                return None
            return pld_lib.from_randomized_response(
                event.noise_parameter, event.num_buckets, value_discretization_interval=step,
                neighboring_relation=pa.NeighboringRelation.REPLACE_ONE)
        if isinstance(event, de.PoissonSampledDpEvent):
            q = event.sampling_probability
            if q == 0:
                return self.zero()
            if isinstance(event.event, de.NonPrivateDpEvent):
                # with probability q the record is exposed (e.g. the threshold of DP
                # partition selection), else nothing of it is: dominated by the pair of
                # (0, q)-DP (Kairouz, Oh & Viswanath 2015)
                return pld_lib.from_privacy_parameters(
                    pld_lib.common.DifferentialPrivacyParameters(0.0, q),
                    value_discretization_interval=step)
            sigma = gaussian_noise_multiplier(event.event)
            if sigma is not None:
                return _gaussian_pld(sigma, q, step, self.log_tail)
            if (isinstance(event.event, de.LaplaceDpEvent)
                    and 0 < 1.0 / event.event.noise_multiplier <= _LAPLACE_DIRECT):
                return pld_lib.from_laplace_mechanism(
                    event.event.noise_multiplier, value_discretization_interval=step,
                    sampling_prob=q)
        eps = pure_epsilon(event)
        if eps is not None and math.isfinite(eps):  # any other pure eps-DP event
            return _pure_pld(eps, step)
        raise ConfigError(f"{describe(event)} is not supported by the 'pld' accountant "
                          "(try accountant='rdp')")

    def repeat(self, cost: PLD | None, count: int) -> PLD | None:
        if cost is None or cost is self._identity:
            return cost
        return cost.self_compose(count)

    def combine(self, a: PLD | None, b: PLD | None) -> PLD | None:
        if a is None or b is None:
            return None
        if a is self._identity or b is self._identity:  # skip a convolution with {0: 1}
            return b if a is self._identity else a
        return a.compose(b)

    def parallel(self, costs: list[PLD | None]) -> PLD | None:
        if len(costs) > 1:
            logger.info("parallel composition of %d different events accounted as their "
                        "sequential composition (an over-estimate) by the PLD accountant",
                        len(costs))
        total = self.zero()
        for c in costs:
            total = self.combine(total, c)
        return total


class PLDAccountant(Accountant):
    """Tight (epsilon, delta) from pessimistic privacy loss distributions."""

    name = "pld"

    def __init__(self, value_discretization_interval: float = DEFAULT_INTERVAL,
                 log_mass_truncation_bound: float = DEFAULT_LOG_TAIL) -> None:
        super().__init__()
        step = value_discretization_interval
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not (
                0 < step <= 0.1 and math.isfinite(step)):
            raise ConfigError(f"value_discretization_interval={step!r} is not allowed: "
                              "must be in (0, 0.1]")
        tail = log_mass_truncation_bound
        if isinstance(tail, bool) or not isinstance(tail, (int, float)) or not (
                -200 <= tail <= -10):
            raise ConfigError(f"log_mass_truncation_bound={tail!r} is not allowed: must be "
                              "in [-200, -10]")
        self._algebra = _Plds(float(step), float(tail))
        self._pld: PLD | None = self._algebra.zero()
        self._history: tuple | None = None  # (event, older history): shared by copies
        self._rdp: RDPAccountant | None = None  # the fallback, once an event needs it

    @property
    def value_discretization_interval(self) -> float:
        return self._algebra.interval

    @property
    def uses_rdp_fallback(self) -> bool:
        """True once an event without a PLD (e.g. a zCDP event) made RDP the bound."""
        return self._rdp is not None

    def _compose(self, event: de.DpEvent) -> None:
        if self._rdp is None:
            try:
                self._pld = self._algebra.combine(self._pld, fold(event, self._algebra))
            except ConfigError:
                self._rdp = self._replay_in_rdp(event)
        else:
            rdp = self._rdp.copy()  # copy-on-write: copies of this accountant share it
            rdp._compose(event)
            self._rdp = rdp
        self._history = (event, self._history)

    def _replay_in_rdp(self, event: de.DpEvent) -> RDPAccountant:
        """An RDP accountant holding every event so far and ``event`` (ConfigError if RDP
        cannot price it either)."""
        rdp = RDPAccountant()
        try:
            rdp._compose(event)
        except ConfigError:
            raise ConfigError(f"{describe(event)} is supported by neither the 'pld' nor the "
                              "'rdp' accountant") from None
        node = self._history
        while node is not None:
            rdp._compose(node[0])
            node = node[1]
        logger.info("%s has no privacy loss distribution: this accountant now reports the "
                    "RDP bound of the whole composition", describe(event))
        return rdp

    def _epsilon(self, delta: float) -> float:
        if self._rdp is not None:
            return self._rdp._epsilon(delta)
        return math.inf if self._pld is None else float(self._pld.get_epsilon_for_delta(delta))

    def _delta(self, epsilon: float) -> float:
        if self._rdp is not None:
            return self._rdp._delta(epsilon)
        return 1.0 if self._pld is None else float(self._pld.get_delta_for_epsilon(epsilon))

    def __repr__(self) -> str:
        return (f"PLDAccountant(value_discretization_interval={self._algebra.interval:g}, "
                f"log_mass_truncation_bound={self._algebra.log_tail:g})")
