"""Distributed noise: each of n parties adds a share, and any t honest shares alone suffice.

In the hybrid approach to private federated learning (Truex, Baracaldo, Anwar, Steinke,
Ludwig, Zhang & Zhou, "A hybrid approach to privacy-preserving federated learning", AISec
2019) each party adds a *share* of the noise to its own answer before the answers are
summed under encryption. With t the minimum number of honest, non-colluding parties, the
shares are calibrated so that the shares of **any t honest parties sum to the noise
central DP needs**; the colluding parties' shares (at most n - t of them, whose values the
colluders know and can subtract) are then not needed for privacy. The aggregate holds the
noise of all n parties, n/t times the central variance: t = n is central DP's accuracy,
t = 1 local DP's.

Each mechanism below is a :class:`~veil.dp.mechanism.Mechanism` whose :attr:`event` is the
cost of central DP with the noise of t honest parties, i.e. what the :class:`~veil.dp.Ledger`
charges per query; :meth:`DistributedMechanism.share` draws one party's share, and
``_randomize`` (called by ``Ledger.release``) adds the shares of all n parties to a true
aggregate, the noise-only simulation of a protocol run. The calibrations, with S the
query's sensitivity and z the noise multiplier (scale over sensitivity):

* :class:`DistributedGaussian` -- share ``N(0, z^2 S^2 / t)`` (S the L2 sensitivity): t
  shares sum to ``N(0, z^2 S^2)``, the Gaussian mechanism with multiplier z (Truex et al.
  2019, Sec. 4; z from the analytic calibration of Balle & Wang 2018 for one release, or
  from an accountant for many). Cost: ``GaussianDpEvent(z)``.
* :class:`DistributedLaplace` -- share ``G1 - G2`` with ``G1, G2 ~ Gamma(1/t, b)``
  independent, ``b = z S`` (S the L1 sensitivity, z = 1/epsilon): the Laplace distribution
  is infinitely divisible, ``Lap(b) = Exp(b) - Exp(b)`` and ``Exp(b) = Gamma(1, b)`` is the
  sum of t independent ``Gamma(1/t, b)``, so t shares sum to ``Lap(b)`` exactly (Truex et
  al. 2019, Sec. 4, after Dwork, Kenthapadi, McSherry, Mironov & Naor 2006). Cost:
  ``LaplaceDpEvent(z)``.
* :class:`DistributedSkellam` (integer answers, exact accounting) -- share
  ``Pois(mu / (2t)) - Pois(mu / (2t))``, a Skellam of variance ``mu / t``; sums of
  independent Skellams are Skellam, so t shares sum to the Skellam of variance
  ``mu = z^2 S_2^2`` exactly, whose RDP curve is bounded by Agarwal, Kairouz & Liu (NeurIPS
  2021; :mod:`veil.dp.accounting.skellam`). Cost: ``SkellamDpEvent(mu, S_1, S_2)``. Integer
  noise on integer answers survives encryption and modular sums with no rounding, so no
  floating-point artefact can leak (Mironov 2012): this is the default of veil's hybrid
  protocol. (The distributed discrete Gaussian of Kairouz, Liu & Steinke, ICML 2021, which
  needs an extra divergence term because sums of discrete Gaussians are not discrete
  Gaussian, is what :class:`veil.fl.strategies.SecAgg` uses.)

The Gaussian and Laplace shares are doubles and their stated guarantee is that of the
ideal real-valued mechanism, as in the paper; the Skellam mechanism's is exact.

:func:`calibrate_multiplier` finds the smallest z for which a planned sequence of queries
(their sensitivities) meets an (epsilon, delta) budget under an accountant, so each query
of a learner can be charged its own event and the whole sequence fits exactly.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import (
    check_array,
    check_choice,
    check_delta,
    check_epsilon,
    check_positive,
)
from veil.dp._numeric import check_integer_value
from veil.dp.accounting.calibration import calibrate
from veil.dp.accounting.guarantees import gaussian_epsilon
from veil.dp.accounting.rdp import RDPAccountant
from veil.dp.accounting.registry import DEFAULT_ACCOUNTANT
from veil.dp.accounting.skellam import SkellamDpEvent
from veil.dp.budget import FixedAllocation, noise_decay
from veil.dp.gaussian import analytic_gaussian_sigma
from veil.dp.mechanism import Mechanism
from veil.dp.trust import Trust
from veil.errors import ConfigError
from veil.random import Generator, RngLike, check_rng

__all__ = ["DistributedMechanism", "DistributedGaussian", "DistributedLaplace",
           "DistributedSkellam", "NOISES", "distributed_noise", "calibrate_multiplier"]


def _one_of(epsilon: Any, noise_multiplier: Any) -> None:
    if (epsilon is None) == (noise_multiplier is None):
        raise ConfigError(f"epsilon={epsilon!r}, noise_multiplier={noise_multiplier!r} are not "
                          "allowed: give exactly one of them")


class DistributedMechanism(Mechanism):
    """Noise added in shares by ``parties`` parties; any ``honest`` of them give the central
    noise (module docstring). Subclasses define :meth:`share` and :attr:`share_variance`.
    """

    #: the noise family's name in :data:`NOISES`
    kind: ClassVar[str]
    #: True when shares (and answers) are integers
    integer: ClassVar[bool] = False

    def __init__(self, parties: int, honest: int) -> None:
        self.trust = Trust(parties, honest)
        self.honest, self.parties = self.trust.honest, self.trust.parties

    @abstractmethod
    def share(self, size: int | tuple[int, ...], rng: RngLike = None) -> np.ndarray:
        """One party's noise share for ``size`` coordinates."""

    @property
    @abstractmethod
    def share_variance(self) -> float:
        """Variance of one party's share, per coordinate."""

    @abstractmethod
    def tail_bound(self, bits: int = 64) -> float:
        """A bound x with ``P(|share| > x) <= 2^-bits`` per coordinate (for encoding ranges)."""

    @property
    def central_variance(self) -> float:
        """Variance of the noise of ``honest`` parties: central DP's noise."""
        return self.honest * self.share_variance

    @property
    def aggregate_variance(self) -> float:
        """Variance of the noise of all ``parties`` parties: what the aggregate holds."""
        return self.parties * self.share_variance

    def check(self, value: Any) -> np.ndarray:
        """The value to randomize, validated (DataError for bad data)."""
        return check_array(value, "value")

    def _randomize(self, value: Any, rng: Generator) -> Any:
        """``value`` plus the shares of all parties (the simulated aggregate of a run)."""
        x = self.check(value)
        noisy = x + sum(self.share(x.shape, rng) for _ in range(self.parties))
        return noisy.item() if x.ndim == 0 else noisy

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"parties={self.parties}, honest={self.honest}, "
                f"share_variance={self.share_variance:g})")


class DistributedGaussian(DistributedMechanism):
    """Shares ``N(0, z^2 S^2 / t)``; any t of them sum to the Gaussian mechanism ``N(0, z^2 S^2)``.

    ``sensitivity`` S is the L2 sensitivity. Give ``epsilon`` (z by the analytic calibration
    of Balle & Wang 2018 for one release at ``delta``) or ``noise_multiplier`` z (epsilon is
    then the exact analytic one at ``delta``). Cost: ``GaussianDpEvent(z)``.
    """

    kind = "gaussian"

    def __init__(self, epsilon: float | None = None, delta: float = 1e-6,
                 sensitivity: float = 1.0, *, parties: int, honest: int,
                 noise_multiplier: float | None = None) -> None:
        super().__init__(parties, honest)
        _one_of(epsilon, noise_multiplier)
        self.delta = check_delta(delta)
        if self.delta == 0:
            raise ConfigError("delta=0 is not allowed for Gaussian noise: it needs delta in "
                              "(0, 1); use DistributedLaplace for pure epsilon-DP")
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        if epsilon is not None:
            self.epsilon = check_epsilon(epsilon)
            self.noise_multiplier = analytic_gaussian_sigma(self.epsilon, self.delta)
        else:
            self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
            self.epsilon = gaussian_epsilon(self.noise_multiplier, self.delta)
        self.sigma = self.noise_multiplier * self.sensitivity   # central standard deviation

    @property
    def event(self) -> de.DpEvent:
        return de.GaussianDpEvent(self.noise_multiplier)

    @property
    def share_variance(self) -> float:
        return self.sigma ** 2 / self.honest

    def share(self, size: int | tuple[int, ...], rng: RngLike = None) -> np.ndarray:
        return check_rng(rng).normal(0.0, self.sigma / math.sqrt(self.honest), size)

    def tail_bound(self, bits: int = 64) -> float:
        # P(|N(0, s^2)| > x) <= 2 exp(-x^2 / (2 s^2))
        return math.sqrt(self.share_variance * 2.0 * (bits + 1) * math.log(2.0))


class DistributedLaplace(DistributedMechanism):
    """Shares ``Gamma(1/t, b) - Gamma(1/t, b)``; any t of them sum to ``Lap(b)`` exactly.

    ``sensitivity`` S is the L1 sensitivity, ``b = S / epsilon`` (or ``b = z S`` for a given
    ``noise_multiplier`` z = 1/epsilon). Pure epsilon-DP (delta = 0). Cost:
    ``LaplaceDpEvent(z)``.
    """

    kind = "laplace"

    def __init__(self, epsilon: float | None = None, sensitivity: float = 1.0, *,
                 parties: int, honest: int, noise_multiplier: float | None = None) -> None:
        super().__init__(parties, honest)
        _one_of(epsilon, noise_multiplier)
        self.delta = 0.0
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        if epsilon is not None:
            self.epsilon = check_epsilon(epsilon)
            self.noise_multiplier = 1.0 / self.epsilon
        else:
            self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
            self.epsilon = 1.0 / self.noise_multiplier
        self.scale = self.noise_multiplier * self.sensitivity   # b of the central Lap(b)

    @property
    def event(self) -> de.DpEvent:
        return de.LaplaceDpEvent(self.noise_multiplier)

    @property
    def share_variance(self) -> float:
        return 2.0 * self.scale ** 2 / self.honest   # Var Gamma(k, b) = k b^2, k = 1/t

    def share(self, size: int | tuple[int, ...], rng: RngLike = None) -> np.ndarray:
        g = check_rng(rng)
        k = 1.0 / self.honest
        return g.gamma(k, self.scale, size) - g.gamma(k, self.scale, size)

    def tail_bound(self, bits: int = 64) -> float:
        # Gamma(k, b) with k <= 1 is stochastically below Exp(b), and |G1 - G2| <= max(G1, G2):
        # P(|share| > x) <= 2 exp(-x / b)
        return self.scale * (bits + 1) * math.log(2.0)


class DistributedSkellam(DistributedMechanism):
    """Integer shares ``Pois(mu/(2t)) - Pois(mu/(2t))``; any t of them sum to the Skellam of
    variance ``mu = z^2 S_2^2`` exactly.

    ``l2_sensitivity`` / ``l1_sensitivity``: norms of the change of the integer answer
    between neighbouring datasets; ``l1_sensitivity`` defaults to ``S_2^2``, a valid bound
    for integer vectors (each non-zero entry is at least 1 in magnitude). Give ``epsilon``
    (z calibrated by the RDP bound for one release at ``delta``) or ``noise_multiplier`` z.
    Cost: ``SkellamDpEvent(mu, S_1, S_2)``.
    """

    kind = "skellam"
    integer = True

    def __init__(self, epsilon: float | None = None, delta: float = 1e-6,
                 l2_sensitivity: float = 1.0, l1_sensitivity: float | None = None, *,
                 parties: int, honest: int, noise_multiplier: float | None = None) -> None:
        super().__init__(parties, honest)
        _one_of(epsilon, noise_multiplier)
        self.delta = check_delta(delta)
        if self.delta == 0:
            raise ConfigError("delta=0 is not allowed for Skellam noise: its guarantee is "
                              "Renyi DP, which needs delta in (0, 1)")
        self.l2_sensitivity = check_positive(l2_sensitivity, "l2_sensitivity")
        self.l1_sensitivity = (self.l2_sensitivity ** 2 if l1_sensitivity is None
                               else check_positive(l1_sensitivity, "l1_sensitivity"))
        if epsilon is not None:
            self.noise_multiplier = calibrate(self._event_at, check_epsilon(epsilon),
                                              self.delta, "rdp", rtol=1e-4)
        else:
            self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
        self.variance = (self.noise_multiplier * self.l2_sensitivity) ** 2
        accountant = RDPAccountant()
        accountant.compose(self.event)
        self.epsilon = accountant.get_epsilon(self.delta)

    def _event_at(self, z: float) -> de.DpEvent:
        return SkellamDpEvent((z * self.l2_sensitivity) ** 2, self.l1_sensitivity,
                              self.l2_sensitivity)

    @property
    def event(self) -> de.DpEvent:
        return SkellamDpEvent(self.variance, self.l1_sensitivity, self.l2_sensitivity)

    @property
    def share_variance(self) -> float:
        return self.variance / self.honest

    def share(self, size: int | tuple[int, ...], rng: RngLike = None) -> np.ndarray:
        g = check_rng(rng)
        lam = self.variance / (2.0 * self.honest)
        return g.poisson(lam, size) - g.poisson(lam, size)

    def tail_bound(self, bits: int = 64) -> float:
        # Bernstein for Poisson(lam): P(|P - lam| >= x) <= 2 exp(-x^2 / (2 (lam + x/3))), so
        # P(|P1 - P2| >= 2x) <= 4 exp(-x^2 / (2 (lam + x/3))) <= 2^-bits at the x below.
        lam = self.variance / (2.0 * self.honest)
        s = (bits + 2) * math.log(2.0)
        return 2.0 * math.ceil(s / 3.0 + math.sqrt(s * s / 9.0 + 2.0 * lam * s))

    def check(self, value: Any) -> np.ndarray:
        return check_integer_value(value, "Skellam")


#: the noise families by name
NOISES: dict[str, type[DistributedMechanism]] = {
    cls.kind: cls for cls in (DistributedSkellam, DistributedGaussian, DistributedLaplace)}


def distributed_noise(kind: str, noise_multiplier: float, *, l1_sensitivity: float,
                      l2_sensitivity: float, parties: int, honest: int,
                      delta: float = 1e-6) -> DistributedMechanism:
    """The ``kind`` mechanism with multiplier ``noise_multiplier`` for a query with these
    sensitivities (Laplace uses the L1, Gaussian the L2, Skellam both)."""
    check_choice(kind, "noise", tuple(NOISES))
    if kind == "laplace":
        return DistributedLaplace(sensitivity=l1_sensitivity, parties=parties, honest=honest,
                                  noise_multiplier=noise_multiplier)
    if kind == "gaussian":
        return DistributedGaussian(delta=delta, sensitivity=l2_sensitivity, parties=parties,
                                   honest=honest, noise_multiplier=noise_multiplier)
    return DistributedSkellam(delta=delta, l2_sensitivity=l2_sensitivity,
                              l1_sensitivity=l1_sensitivity, parties=parties, honest=honest,
                              noise_multiplier=noise_multiplier)


def _event(kind: str, z: float, l1: float, l2: float) -> de.DpEvent:
    if kind == "gaussian":
        return de.GaussianDpEvent(z)
    if kind == "laplace":
        return de.LaplaceDpEvent(z)
    return SkellamDpEvent((z * l2) ** 2, l1, l2)


def calibrate_multiplier(kind: str, epsilon: float, delta: float,
                         sensitivities: Sequence[tuple[float, float]], *,
                         accountant: str = DEFAULT_ACCOUNTANT, rtol: float = 1e-3) -> float:
    """The smallest noise multiplier z (to ``rtol``) for which the queries with these
    ``(l1, l2)`` sensitivities, each released with ``kind`` noise of multiplier z, compose
    to (epsilon, delta)-DP under ``accountant``.

    Gaussian and Laplace costs do not depend on the sensitivity (the noise scales with
    it), so every query costs the same and the budget is split evenly over the k queries
    (:mod:`veil.dp.budget`): Laplace with ``delta=0`` takes :class:`FixedAllocation`'s
    share epsilon / k, ``z = k / epsilon`` (basic composition, exact for pure DP; Friedman
    & Schuster 2010 split a tree's budget over its depths this way); Gaussian takes the
    constant schedule of :func:`~veil.dp.budget.noise_decay` (decay 1), whose k-fold
    composition meets the budget under ``accountant``. A Skellam event depends on the
    sensitivities themselves, so its plan is calibrated as a whole.
    """
    check_choice(kind, "noise", tuple(NOISES))
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    plan = [(check_positive(l1, f"sensitivities[{i}][0]"),
             check_positive(l2, f"sensitivities[{i}][1]"))
            for i, (l1, l2) in enumerate(sensitivities)]
    if not plan:
        raise ConfigError("sensitivities=[] is not allowed: plan at least one query")
    if kind == "laplace" and delta == 0:
        return 1.0 / FixedAllocation(epsilon, 0.0, len(plan)).share(0)[0]
    if kind != "laplace" and delta == 0:
        raise ConfigError(f"delta=0 is not allowed with noise={kind!r}: use delta > 0 or "
                          "noise='laplace'")
    if kind == "gaussian":
        return noise_decay(epsilon, delta, len(plan), decay=1.0, accountant=accountant,
                           rtol=rtol)[0]
    counts: dict[tuple[float, float], int] = {}
    for key in plan:   # identical queries are priced once, as a self-composition
        counts[key] = counts.get(key, 0) + 1

    def event_for(z: float) -> de.DpEvent:
        parts = [de.SelfComposedDpEvent(_event(kind, z, l1, l2), c) if c > 1
                 else _event(kind, z, l1, l2) for (l1, l2), c in counts.items()]
        return parts[0] if len(parts) == 1 else de.ComposedDpEvent(parts)

    return calibrate(event_for, epsilon, delta, accountant, rtol=rtol)
