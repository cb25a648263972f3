"""The Skellam mechanism's privacy event and its Renyi-DP curve.

The symmetric Skellam distribution of variance ``mu`` is ``Pois(mu/2) - Pois(mu/2)``. Adding
it independently to every coordinate of an integer vector ``f(D)`` whose change between
neighbouring datasets has L1 norm at most ``Delta_1`` and L2 norm at most ``Delta_2`` is
(alpha, eps(alpha))-RDP for every integer order alpha > 1 with

    eps(alpha) = alpha Delta_2^2 / (2 mu)
                 + min( ((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2),  3 Delta_1 / (2 mu) )

(Agarwal, Kairouz & Liu, "The Skellam mechanism for differentially private federated
learning", NeurIPS 2021, the multidimensional bound, Cor. 3.6 of the arXiv version
2110.04995 with their per-Poisson mean mu/2). The first term is the Gaussian
mechanism's curve for the same variance; the second vanishes as mu grows. Sums of
independent Skellams are Skellam (variances add), which is what makes the mechanism
suited to distributed noise: n parties each adding variance ``mu / t`` give any t of them
exactly the central Skellam of variance mu (:mod:`veil.dp.distributed`).

The bound is proved for integer orders. A Renyi divergence does not decrease with the
order, so at a fractional order alpha veil uses the bound at ceil(alpha) (and at 2 for
alpha in (1, 2)): an upper bound, hence sound for every order of the accountant's grid.
Neighbours are add/remove-one (veil's convention): the sensitivities bound the change of
``f`` when one record is added or removed.
"""

from __future__ import annotations

import attr
import numpy as np
from dp_accounting import dp_event as de

__all__ = ["SkellamDpEvent", "skellam_rdp"]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SkellamDpEvent(de.DpEvent):
    """One release of an integer vector plus Skellam noise of ``variance`` per coordinate.

    ``l1_sensitivity`` / ``l2_sensitivity``: the L1 / L2 norm bounds of the change of the
    integer vector between neighbouring datasets (in the integer units the noise is added
    in).
    """

    variance: float
    l1_sensitivity: float
    l2_sensitivity: float


def skellam_rdp(event: SkellamDpEvent, orders: np.ndarray) -> np.ndarray:
    """The RDP curve of ``event`` at ``orders`` (module docstring; inf for zero variance)."""
    mu, d1, d2 = event.variance, event.l1_sensitivity, event.l2_sensitivity
    alpha = np.maximum(np.ceil(np.asarray(orders, dtype=np.float64)), 2.0)
    if d1 == 0 and d2 == 0:
        return np.zeros_like(alpha)
    if mu == 0:
        return np.full_like(alpha, np.inf)
    gaussian = alpha * d2 * d2 / (2.0 * mu)
    correction = np.minimum(((2.0 * alpha - 1.0) * d2 * d2 + 6.0 * d1) / (4.0 * mu * mu),
                            3.0 * d1 / (2.0 * mu))
    return gaussian + correction
