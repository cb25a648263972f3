"""A private estimate of the dataset size, for DP-SGD without a public size.

The convention and its reasoning are stated once, in :mod:`veil.learn.public`: a declared
slice ``epsilon_n`` of the budget buys a count (sensitivity 1 under add/remove neighbours)
through the two-sided geometric mechanism (Ghosh, Roughgarden & Sundararajan 2009), charged
to the ledger, and its lower confidence bound is the size N that sets ``q = b / N``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from veil._validation import check_epsilon, check_probability
from veil.dp.laplace import DiscreteLaplace
from veil.dp.ledger import Ledger
from veil.random import RngLike

__all__ = ["EstimatedSize", "estimated_size"]


@dataclass(frozen=True)
class EstimatedSize:
    """A private dataset size, estimated with ``epsilon`` of the budget."""

    epsilon: float
    confidence: float = 0.95

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon, "EstimatedSize.epsilon")
        check_probability(self.confidence, "EstimatedSize.confidence", low_open=True,
                          high_open=True)


def estimated_size(spec: EstimatedSize, actual: int, ledger: Ledger, owner: str,
                   rng: RngLike = None) -> int:
    """Release the count ``actual`` through ``ledger`` (charged: ``spec.epsilon``, pure) and
    return its lower confidence bound (at least 1); the exact count is never logged."""
    mechanism = DiscreteLaplace(spec.epsilon, sensitivity=1)
    noisy = ledger.release(mechanism, int(actual), label=f"{owner}: dataset size estimate",
                           rng=rng)
    margin = math.ceil(mechanism.scale * math.log(1.0 / (1.0 - spec.confidence)))
    return max(1, int(noisy) - margin)
