"""The sparse vector technique: AboveThreshold (Dwork & Roth 2014, Algorithm 1).

For a stream of queries ``f_1, f_2, ...`` of sensitivity ``Delta`` and a public threshold
``T``, AboveThreshold draws ``rho ~ Lap(2 Delta / epsilon)`` once and, for each query,
``nu_i ~ Lap(4 Delta / epsilon)``. It answers "below" while ``f_i(D) + nu_i < T + rho``,
answers "above" at the first query with ``f_i(D) + nu_i >= T + rho``, and halts. The
whole run costs epsilon, however many "below" answers it gave (Dwork & Roth 2014,
Theorem 3.23; Dwork, Naor, Reingold, Rothblum & Vadhan 2009).

Floating-point safety: the comparisons are made exactly on an integer lattice. Queries
are floored to a grid ``g`` (the power of two in ``(Delta/2048, Delta/1024]``): the
integer queries ``floor(f_i / g)`` have sensitivity ``Delta_Z = ceil(Delta / g)`` (floors
of two reals at distance d differ by at most ceil(d)); the threshold is ``ceil(T / g)``;
``rho`` and ``nu_i`` are discrete Laplace with scales ``2 Delta_Z / epsilon`` and
``4 Delta_Z / epsilon``, drawn exactly. The proof of Theorem 3.23 only uses the ratio bounds
``P[rho = r] <= e^(eps/2) P[rho = r + s]`` for ``|s| <= Delta_Z`` and the same for
``nu`` with ``|s| <= 2 Delta_Z``, integer shifts that the discrete Laplace satisfies exactly,
so the lattice run is epsilon-DP. Flooring moves the threshold by less than ``g``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_array, check_epsilon, check_positive
from veil.dp._numeric import check_grid_value, div_up, noise_grid
from veil.dp.ledger import Ledger
from veil.dp.mechanism import Mechanism
from veil.dp.samplers import discrete_laplace
from veil.dp.selection import pure_dp_event
from veil.errors import ConfigError
from veil.random import Generator, RngLike, check_rng

__all__ = ["AboveThreshold", "SparseVector"]


class AboveThreshold(Mechanism):
    """One AboveThreshold run (see the module docstring); costs epsilon in all.

    ``ledger.release(AboveThreshold(...), answers)`` runs it non-interactively over a
    sequence of query answers and returns the index of the first "above", or None.
    For interactive use (queries chosen one at a time) use :class:`SparseVector`.
    """

    def __init__(self, epsilon: float, threshold: float, sensitivity: float = 1.0) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = 0.0
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        t = threshold
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)) \
                or not math.isfinite(t):
            raise ConfigError(f"threshold={threshold!r} is not allowed: expected a finite number")
        self.threshold = float(t)
        self.grid = noise_grid(self.sensitivity)
        self.lattice_sensitivity = math.ceil(self.sensitivity / self.grid)
        if abs(self.threshold) >= 2.0 ** 52 * self.grid:
            raise ConfigError(f"threshold={threshold!r} is not allowed: it must be below "
                              f"{2.0 ** 52 * self.grid:g} in magnitude for this sensitivity")
        self.lattice_threshold = math.ceil(self.threshold / self.grid)
        self.threshold_scale = div_up(2.0 * self.lattice_sensitivity, self.epsilon)
        self.query_scale = div_up(4.0 * self.lattice_sensitivity, self.epsilon)

    @property
    def event(self) -> de.DpEvent:
        return pure_dp_event(self.epsilon)

    def check(self, value: Any) -> np.ndarray:
        """Query answers as lattice integers (DataError for bad data)."""
        x = check_grid_value(value, self.grid)
        return np.floor(x / self.grid).astype(np.int64)

    def _noisy_threshold(self, rng: Generator) -> int:
        """``ceil(T / g) + rho`` (drawn once per run)."""
        return self.lattice_threshold + int(discrete_laplace(self.threshold_scale, rng=rng))

    def _above(self, lattice_values: np.ndarray, noisy_threshold: int,
              rng: Generator) -> np.ndarray:
        """Which lattice query values, each with fresh noise, reach the noisy threshold."""
        nu = discrete_laplace(self.query_scale, lattice_values.shape, rng)
        return lattice_values + nu >= noisy_threshold

    def _randomize(self, value: Any, rng: Generator) -> int | None:
        q = check_array(value, "answers", ndim=1)
        hits = np.flatnonzero(self._above(self.check(q), self._noisy_threshold(rng), rng))
        return int(hits[0]) if hits.size else None

    def __repr__(self) -> str:
        return (f"AboveThreshold(epsilon={self.epsilon:g}, threshold={self.threshold:g}, "
                f"sensitivity={self.sensitivity:g})")


class SparseVector:
    """Interactive AboveThreshold: :meth:`query` answers one query at a time and halts after
    the first True.

    The run's cost (epsilon) is charged through ``ledger`` (``ledger.charge``) before the
    first answer; ``ledger=None`` charges a one-off :class:`~veil.dp.Ledger` holding exactly
    epsilon. A halted run refuses further queries (a new run must pay again).
    """

    def __init__(self, epsilon: float, threshold: float, sensitivity: float = 1.0, *,
                 ledger: Ledger | None = None, label: str | None = None,
                 rng: RngLike = None) -> None:
        from veil.dp.ledger import Ledger

        self.mechanism = AboveThreshold(epsilon, threshold, sensitivity)
        self.ledger = Ledger(self.mechanism.epsilon) if ledger is None else ledger
        self.label = label or "sparse vector"
        self._rng = check_rng(rng)
        self._threshold: int | None = None
        self.answers: list[bool] = []

    @property
    def halted(self) -> bool:
        """True once a query was answered "above"."""
        return bool(self.answers) and self.answers[-1]

    def query(self, value: float) -> bool:
        """Whether this query's answer (a number of sensitivity ``sensitivity``) is above
        the threshold, privately."""
        if self.halted:
            raise ConfigError("this SparseVector has halted after its 'above' answer; start a "
                              "new one (it is charged again)")
        lattice = self.mechanism.check(check_array(value, "value", ndim=0).reshape(1))
        if self._threshold is None:
            self.ledger.charge(self.mechanism.event, label=self.label)
            self._threshold = self.mechanism._noisy_threshold(self._rng)
        answer = bool(self.mechanism._above(lattice, self._threshold, self._rng)[0])
        self.answers.append(answer)
        return answer
