"""Joint queries across parties, the sealed-bid auction, and the modern millionaires' test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from veil.errors import ConfigError, DataError
from veil.mpc import Session
from veil.mpc.queries import (
    sealed_bid_auction,
    secure_argmax,
    secure_max,
    secure_min,
    secure_sum,
)

U = 2.0**-16


def test_sum_max_min_argmax_over_parties():
    salaries = np.array([[52.5, 71.0, 38.25], [66.0, 90.5, 12.5], [48.0, 90.5, 40.0],
                         [70.0, 15.0, 39.75]])
    with Session(parties=4, rng=1) as s:
        shared = [s.share(row, owner=i) for i, row in enumerate(salaries)]
        assert np.all(np.abs(secure_sum(shared).reveal() - salaries.sum(axis=0)) <= 2 * U)
        assert np.array_equal(secure_max(shared).reveal(), salaries.max(axis=0))
        assert np.array_equal(secure_min(shared).reveal(), salaries.min(axis=0))
        index, best = secure_argmax(shared)
        assert index.reveal().tolist() == [3, 1, 2]  # the tie at 90.5 goes to party 1
        assert np.array_equal(best.reveal(), salaries.max(axis=0))
        with pytest.raises(DataError, match="different shapes"):
            secure_sum([shared[0], shared[1][:2]])


@pytest.mark.parametrize("price", ["first", "second"])
def test_sealed_bid_auction_reveals_winner_and_price(price):
    bids = [120, 340, 95, 310, 200]
    with Session(parties=5, rng=2) as s:
        shared = [s.share(np.array(b), owner=i) for i, b in enumerate(bids)]
        with s.measure() as m:
            winner, paid = sealed_bid_auction(shared, price=price)
    assert winner == 1
    assert paid == (340 if price == "first" else 310)
    # only two values were opened (two reveal rounds of one step each besides the protocol)
    assert m.cost.rounds[0] == (3 * 9 + 2 if price == "first" else 3 * 9 + 9 + 3 * 9 + 2)


def test_auction_bad_input():
    with Session(parties=2, rng=3) as s:
        a, b = s.share(np.array(5), owner=0), s.share(np.array(7), owner=1)
        with pytest.raises(ConfigError, match="price="):
            sealed_bid_auction([a, b], price="third")
        with pytest.raises(DataError, match="at least two bids"):
            sealed_bid_auction([a])


def test_millionaires_by_secure_comparison_all_pairs():
    # The modern answer to Yao's problem: one batched comparison of shared integers.
    pairs = list(itertools.product(range(1, 11), repeat=2))
    alice = np.array([i for i, _ in pairs])
    bob = np.array([j for _, j in pairs])
    with Session(parties=2, rng=4) as s:
        richer = (s.share(alice, owner=0) >= s.share(bob, owner=1)).reveal()
    assert richer.tolist() == [int(i >= j) for i, j in pairs]
