"""Correlated randomness: the dealer's items satisfy their relations; Paillier triples work."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import ConfigError
from veil.mpc import Session
from veil.mpc.triples import Dealer, DealerShares


def _fetch(n, items, seq=7):
    dealer = Dealer(n, rng=n)
    payload = dealer.deal(seq, items)
    views = []
    for i in range(n):
        gen = DealerShares(i, dealer.seeds[i]).fetch(seq, items, payload if i == 0 else [])
        try:
            next(gen)
            raise AssertionError("the dealer's shares need no messages")
        except StopIteration as stop:
            views.append(stop.value)
    return views


def _add(parts):
    total = parts[0].copy()
    for p in parts[1:]:
        total = total + p
    return total


def _xor(parts):
    total = parts[0].copy()
    for p in parts[1:]:
        total = total ^ p
    return total


@pytest.mark.parametrize("n", [2, 3, 5])
def test_dealer_items(n):
    items = [["mul", [4, 3], [3]], ["matmul", [4, 3], [3, 2]], ["and", [2, 5]],
             ["edabit", [6]], ["dabit", [6]], ["trunc", [6], 16]]
    views = _fetch(n, items)
    k = {name: i for i, name in enumerate(["mul", "matmul", "and", "edabit", "dabit", "trunc"])}
    a, b, c = (_add([v[k["mul"]][j] for v in views]) for j in range(3))
    assert np.array_equal(c, a * b) and c.shape == (4, 3)
    a, b, c = (_add([v[k["matmul"]][j] for v in views]) for j in range(3))
    assert np.array_equal(c, a @ b)
    a, b, c = (_xor([v[k["and"]][j] for v in views]) for j in range(3))
    assert np.array_equal(c, a & b)
    r, bits = _add([v[k["edabit"]][0] for v in views]), _xor([v[k["edabit"]][1] for v in views])
    assert np.array_equal(r, bits)
    u_bits, u = _xor([v[k["dabit"]][0] for v in views]), _add([v[k["dabit"]][1] for v in views])
    assert set(u_bits.tolist()) <= {0, 1} and np.array_equal(u, u_bits)
    r, shifted, top = (_add([v[k["trunc"]][j] for v in views]) for j in range(3))
    assert np.array_equal(shifted, r >> np.uint64(16))
    assert np.array_equal(top, r >> np.uint64(63)) and set(top.tolist()) == {0, 1}
    # a party's own view is uniform noise: parties 1.. never get the corrected component
    assert not np.array_equal(views[1][k["mul"]][2], c)


def test_dealer_randomness_differs_per_instruction():
    first = _fetch(2, [["mul", [8], [8]]], seq=1)[1][0][0]
    second = _fetch(2, [["mul", [8], [8]]], seq=2)[1][0][0]
    assert not np.array_equal(first, second)


def test_paillier_triples_two_parties():
    with Session(parties=2, correlation="paillier", paillier_bits=512, insecure_ok=True,
                 rng=5) as s:
        x = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]])
        y = np.array([0.5, -4.0, 2.0])
        a, b = s.share(x, owner=0), s.share(y, owner=1)
        u = 2.0**-16
        assert np.all(np.abs((a * b).reveal() - x * y) <= 3 * u)
        assert np.all(np.abs((a @ b).reveal() - x @ y) <= 4 * u)
        assert abs((b @ b).reveal() - y @ y) <= 4 * u
        cost = s.cost()
        assert cost.dealer == (0, 0)  # no dealer at all
        with pytest.raises(ConfigError, match="trusted dealer"):
            _ = a < b


def test_paillier_needs_two_parties_and_big_enough_keys():
    with pytest.raises(ConfigError, match="two parties"):
        Session(parties=3, correlation="paillier", paillier_bits=512, insecure_ok=True)
    with pytest.raises(ConfigError, match="insecure_ok"):
        Session(parties=2, correlation="paillier", paillier_bits=512)
