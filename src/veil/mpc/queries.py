"""Joint queries across parties: secure sum, max, min, argmax, and a sealed-bid auction.

Each function takes one SharedTensor per party (all of one shape; usually party i's input
shared with ``owner=i``) and returns *shared* results: the caller reveals what the parties
agreed to learn, and nothing else is opened. Costs: the sum is local; max/min/argmax are a
comparison tournament of ``ceil(log2 n)`` levels (9 rounds each, see
:func:`veil.mpc.protocols.maximum`).

:func:`sealed_bid_auction` reveals only the winner and the price: the highest bid
(first-price) or the highest other bid (second-price, Vickrey 1961).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from veil._validation import check_choice
from veil.errors import DataError
from veil.mpc.protocols import maximum
from veil.mpc.tensor import SharedTensor, stack

__all__ = ["secure_sum", "secure_max", "secure_min", "secure_argmax", "sealed_bid_auction"]


def _stacked(values: Sequence[SharedTensor]) -> SharedTensor:
    values = list(values)
    if not values or not all(isinstance(v, SharedTensor) for v in values):
        raise DataError("values must be a non-empty sequence of SharedTensors (one per party)")
    shapes = {v.shape for v in values}
    if len(shapes) > 1:
        raise DataError(f"the parties' values have different shapes {sorted(shapes)}")
    return stack(values)


def secure_sum(values: Sequence[SharedTensor]) -> SharedTensor:
    """The elementwise sum of the parties' values (local, no communication)."""
    return _stacked(values).sum(axis=0)


def secure_max(values: Sequence[SharedTensor]) -> SharedTensor:
    """The elementwise maximum over the parties."""
    return maximum(_stacked(values))[0]


def secure_min(values: Sequence[SharedTensor]) -> SharedTensor:
    """The elementwise minimum over the parties."""
    return -maximum(-_stacked(values))[0]


def secure_argmax(values: Sequence[SharedTensor]) -> tuple[SharedTensor, SharedTensor]:
    """(index of the party with the largest value, that value), elementwise, both shared.
    Ties go to the lowest index."""
    best, index = maximum(_stacked(values), index=True)
    return index, best


def sealed_bid_auction(bids: Sequence[SharedTensor], price: str = "first"
                       ) -> tuple[int, float]:
    """Winner and price of a sealed-bid auction; nothing else about the bids is revealed.

    Bids are non-negative. ``price="first"``: the winner pays its bid; ``"second"``: the
    highest losing bid. For the second price the shared winner index w is compared with
    each public party index j (one batched comparison: ``[w == j] = [w - j - 1 < 0] -
    [w - j < 0]`` for integers), the winner's bid is replaced by -1 (one product) and the
    maximum is taken again.
    """
    price = check_choice(price, "price", ("first", "second"))
    stacked = _stacked(bids)
    if stacked.ndim != 1:
        raise DataError(f"bids must be scalars (one per party); got shape {stacked.shape[1:]}")
    if len(bids) < 2:
        raise DataError("an auction needs at least two bids")
    best, winner = maximum(stacked, index=True)
    if price == "first":
        return int(winner.reveal()), float(best.reveal())
    n = stacked.shape[0]
    shifted = winner.reshape(1) - np.arange(n)            # w - j for every j
    both = stack([shifted - 1, shifted])._ltz()            # one batched comparison
    is_winner = both[0] - both[1]
    losers = stacked + is_winner * (-1 - stacked)           # the winner's bid becomes -1
    second = maximum(losers)[0]
    return int(winner.reveal()), float(second.reveal())
