"""Renyi-DP accounting through Google's dp_accounting (Mironov 2017).

Each event is priced as a curve ``eps_RDP(alpha)`` over a grid of orders alpha; curves add
under composition, a parallel composition takes the pointwise maximum (each neighbouring
pair differs in one partition), and the curve converts to (epsilon, delta)-DP by the
improved conversion of Canonne, Kamath & Steinke 2020 (Prop. 12) / Asoodeh et al. 2020:
``eps = min_alpha eps_RDP(alpha) + log1p(-1/alpha) - log(delta * alpha) / (alpha - 1)``.

Leaves are priced by dp_accounting's ``RdpAccountant``: Gaussian (alpha / (2 sigma^2)),
Laplace, Poisson-subsampled Gaussians (Mironov, Talwar & Zhang 2019), randomized response
(replace-one, see :mod:`~veil.dp.accounting.events`), zCDP events, tree aggregation and
repeat-and-select; veil prices the Skellam event itself
(:mod:`~veil.dp.accounting.skellam`). Any other pure eps-DP event (e.g. the discrete
Laplace) is priced as binary randomized response with odds e^eps, which every eps-DP
mechanism is a post-processing of (Kairouz, Oh & Viswanath 2015). A fixed-size batch arrives here
already rewritten by the coupling bound. RDP is a valid privacy filter for adaptively
chosen events only at an order fixed in advance (Feldman & Zrnic 2021): the ledger's
``"rdp"`` policy is :class:`RDPFilter`, which fixes it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from dp_accounting import dp_event as de
from dp_accounting import privacy_accountant as pa
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from veil.dp.accounting.base import Accountant
from veil.dp.accounting.events import describe
from veil.dp.accounting.guarantees import pure_epsilon, pure_stand_in
from veil.dp.accounting.skellam import SkellamDpEvent, skellam_rdp
from veil.dp.accounting.traversal import cached_leaf, fold
from veil.errors import ConfigError

__all__ = ["RDPAccountant", "RDPFilter", "DEFAULT_ORDERS"]

class _ExcludedOrders(logging.Filter):
    """dp_accounting logs a WARNING for every fractional order whose series does not converge
    ("... failed to converge ... Excluding this order"): ten lines per calibration in the
    DP-SGD tutorial. Excluding an order only leaves the minimum over the others, still an
    upper bound, so the line tells a user nothing to act on: it is dropped (to DEBUG here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "Excluding this order" in record.getMessage():
            _log.debug("RDP: %s", record.getMessage())
            return False
        return True


_log = logging.getLogger(__name__)
logging.getLogger("absl").addFilter(_ExcludedOrders())

#: dp_accounting's default orders (1.25 ... 1024)
DEFAULT_ORDERS: tuple[float, ...] = tuple(float(a) for a in rdp_lib.DEFAULT_RDP_ORDERS)


class _RdpCurves:
    """The RDP algebra over a fixed grid of orders."""

    def __init__(self, orders: np.ndarray) -> None:
        self.orders = orders

    def zero(self) -> np.ndarray:
        return np.zeros_like(self.orders)

    def non_private(self) -> np.ndarray:
        return np.full_like(self.orders, np.inf)

    @cached_leaf
    def leaf(self, event: de.DpEvent) -> np.ndarray:
        if isinstance(event, SkellamDpEvent):
            return skellam_rdp(event, self.orders)
        relation = (pa.NeighboringRelation.REPLACE_ONE
                    if isinstance(event, de.RandomizedResponseDpEvent)
                    else pa.NeighboringRelation.ADD_OR_REMOVE_ONE)
        acc = rdp_lib.RdpAccountant(self.orders, relation)
        if not acc.supports(event):
            stand_in = pure_stand_in(event)
            if stand_in is None:
                raise ConfigError(f"{describe(event)} is not supported by the 'rdp' "
                                  "accountant (try accountant='pld')")
            return self.leaf(stand_in)
        acc.compose(event)
        return acc.rdp

    def repeat(self, cost: np.ndarray, count: int) -> np.ndarray:
        return cost * count

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def parallel(self, costs: list[np.ndarray]) -> np.ndarray:
        return np.max(np.stack(costs), axis=0)


class RDPAccountant(Accountant):
    """Renyi-DP composition on a grid of orders (dp_accounting's default grid)."""

    name = "rdp"

    def __init__(self, orders: Sequence[float] = DEFAULT_ORDERS) -> None:
        super().__init__()
        grid = np.asarray(orders, dtype=np.float64)
        if grid.ndim != 1 or grid.size == 0 or not np.all(grid > 1) or not np.all(
                np.isfinite(grid)):
            raise ConfigError(f"orders={orders!r} is not allowed: need finite orders > 1")
        self._algebra = _RdpCurves(grid)
        self._rdp = self._algebra.zero()

    @property
    def orders(self) -> np.ndarray:
        return self._algebra.orders.copy()

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP curve at :attr:`orders`."""
        return self._rdp.copy()

    def _compose(self, event: de.DpEvent) -> None:
        self._rdp = self._rdp + fold(event, self._algebra)

    def _epsilon(self, delta: float) -> float:
        return float(rdp_lib.compute_epsilon(self._algebra.orders, self._rdp, delta)[0])

    def _delta(self, epsilon: float) -> float:
        return float(rdp_lib.compute_delta(self._algebra.orders, self._rdp, epsilon)[0])


def _conversions(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """The (epsilon, delta) conversion at each order separately (the module docstring's
    formula, as dp_accounting's ``compute_epsilon`` before it takes the minimum)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return rdp + np.log1p(-1.0 / orders) - np.log(delta * orders) / (orders - 1.0)


class RDPFilter(RDPAccountant):
    """The ``"rdp"`` ledger policy: a Renyi filter at one order fixed in advance, plus the
    pure-DP route.

    **Why one order.** Feldman & Zrnic 2021 ("Individual Privacy Accounting via a Renyi
    Filter", Thm. 3.1): for a fixed order alpha and budget B, admitting adaptively chosen
    events while ``sum_i rho_i(alpha) <= B`` makes the whole interaction (alpha, B)-RDP,
    hence (epsilon, delta)-DP by any RDP conversion (the improved one of the module
    docstring). Converting the composed curve at the best order *of the moment*, as a
    non-adaptive accountant does, is not covered: the order that admits a charge may change
    with choices made from earlier outputs.

    **Which order.** The first charge, chosen before any output of this ledger exists,
    fixes it: ``alpha*`` is the order at which that charge alone converts best at the
    ledger's delta. So the first block (in veil usually the whole planned schedule: a
    DP-SGD run, the rounds of a federation) costs exactly what a non-adaptive RDP
    accountant says; later charges are priced at alpha*, which may be above the best order
    for the whole sequence (the price of adaptivity), never below its true cost.

    **The pure route.** While every charge is pure DP, basic composition (``sum eps_i``)
    may admit instead, at no delta: the ledger stops at ``N = max(N_pure, N_rdp)``, the
    stopping times of the two filters. Split the transcripts by the route that reached N:
    where the pure filter did, the privacy loss is at most ``sum eps_i <= epsilon``
    pointwise (pure-DP losses are bounded), so those transcripts add nothing to the
    hockey-stick divergence ``sum_o (P(o) - e^epsilon Q(o))_+``; the others are transcripts
    of the Renyi filter alone, with the same probabilities, so they add at most its delta.
    """

    def __init__(self, delta: float, orders: Sequence[float] = DEFAULT_ORDERS) -> None:
        super().__init__(orders)
        self._delta_budget = float(delta)  # the ledger's delta, at which alpha* is chosen
        self._order: int | None = None     # alpha*'s index in the grid, fixed by the first charge

    @property
    def order(self) -> float | None:
        """alpha*, the order fixed by the first charge (None before it)."""
        return None if self._order is None else float(self._algebra.orders[self._order])

    def guarantee(self, event: de.DpEvent, delta: float | None) -> tuple[float, float] | None:
        """Only pure events keep the basic-composition route open (the class docstring)."""
        eps = pure_epsilon(event)
        return None if eps is None else (eps, 0.0)

    def _compose(self, event: de.DpEvent) -> None:
        curve = fold(event, self._algebra)
        if self._order is None and self._delta_budget > 0:
            self._order = int(np.nanargmin(_conversions(self._algebra.orders, curve,
                                                        self._delta_budget)))
        self._rdp = self._rdp + curve

    def _epsilon(self, delta: float) -> float:
        if self._order is None:  # nothing charged, or no delta: only the pure route
            return 0.0 if not np.any(self._rdp) else np.inf
        i = self._order
        return float(rdp_lib.compute_epsilon(self._algebra.orders[i:i + 1],
                                             self._rdp[i:i + 1], delta)[0])

    def _delta(self, epsilon: float) -> float:
        if self._order is None:
            return 0.0 if not np.any(self._rdp) else 1.0
        i = self._order
        return float(rdp_lib.compute_delta(self._algebra.orders[i:i + 1],
                                           self._rdp[i:i + 1], epsilon)[0])
