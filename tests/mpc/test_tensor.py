"""SharedTensor operations against numpy, within the fixed-point error.

Error bounds (f = 16 fractional bits, u = 2^-f): an input is encoded with error <= u/2; a
sum adds the errors; a product x y of encoded inputs is off by <= (|x| + |y|) u/2 + u^2/4
before its truncation, which adds < 1 u (both truncation rules, see veil.mpc.party); a
matrix product sums the per-term input errors and truncates once. Comparisons of encoded
values are exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.errors import ConfigError, CryptoError, DataError, ProtocolError
from veil.mpc import Session, concatenate, stack, where
from veil.mpc.protocols import SIGMOID_MAX_ERROR, sigmoid_reference
from veil.random import default_rng

F = 16
U = 2.0**-F


@pytest.fixture(params=[2, 3], ids=["2 parties", "3 parties"])
def session(request):
    with Session(parties=request.param, frac_bits=F, rng=request.param) as s:
        yield s


def _data(seed, shape, scale=10.0):
    return default_rng(seed).uniform(-scale, scale, size=shape)


def _prod_tol(x, y):
    return (np.abs(x) + np.abs(y)) * U / 2 + U / 4 * U + U


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-30000, 30000), min_size=1, max_size=12), st.integers(2, 4),
       st.integers(0, 3))
def test_share_reveal_round_trip(values, parties, owner):
    with Session(parties=parties, rng=7) as s:
        x = s.share(np.array(values), owner=owner % parties)
        assert np.all(np.abs(x.reveal() - values) <= U / 2)
        ints = s.share(np.rint(values).astype(np.int64), owner=0)
        assert ints.reveal().tolist() == np.rint(values).astype(np.int64).tolist()


def test_linear_operations(session):
    x, y = _data(1, (4, 3)), _data(2, (3,))
    a, b = session.share(x, owner=0), session.share(y, owner=1)
    cases = {"a+b": (a + b, x + y), "a-b": (a - b, x - y), "-a": (-a, -x),
             "a+2.5": (a + 2.5, x + 2.5), "2.5-a": (2.5 - a, 2.5 - x),
             "array+a": (np.ones(3) + a, 1 + x), "a-int": (a - 3, x - 3)}
    for name, (got, want) in cases.items():
        assert np.all(np.abs(got.reveal() - want) <= U), name
    assert (a + b).shape == (4, 3)


def test_products(session):
    x, y = _data(3, (5, 4)), _data(4, (5, 4))
    a, b = session.share(x, owner=0), session.share(y, owner=1)
    assert np.all(np.abs((a * b).reveal() - x * y) <= _prod_tol(x, y))
    row = _data(5, (4,))
    r = session.share(row, owner=1)
    assert np.all(np.abs((a * r).reveal() - x * row) <= _prod_tol(x, row))  # broadcasting
    # public factors: integers are exact, reals are encoded with extra bits
    assert np.all(np.abs((a * 3).reveal() - 3 * x) <= 3 * U / 2)
    for c in (0.37, 1e-3, 123.5):
        tol = np.abs(x) * U / 2 + U + abs(c) * U / 2
        assert np.all(np.abs((a * c).reveal() - x * c) <= tol), c
    assert np.all(np.abs((a / 7).reveal() - x / 7) <= np.abs(x) * U / 2 + U)


def test_matmul(session):
    x, y, v = _data(6, (6, 5)), _data(7, (5, 3)), _data(8, (5,))
    a, b, w = (session.share(m, owner=i % session.parties) for i, m in enumerate((x, y, v)))
    tol = (np.abs(x) @ np.ones((5, 3)) + np.ones((6, 5)) @ np.abs(y)) * U / 2 + 5 * U**2 + U
    assert np.all(np.abs((a @ b).reveal() - x @ y) <= tol)
    assert abs((w @ w).reveal() - v @ v) <= np.sum(np.abs(v)) * U + U
    assert np.all(np.abs((a @ w).reveal() - x @ v) <= np.abs(x) @ np.ones(5) * U + U + 5 * U)
    public = _data(9, (3, 6))
    tol = np.abs(public) @ np.abs(x) * U / 2 + U + np.abs(public) @ np.ones((6, 5)) * U / 2
    assert np.all(np.abs((public @ a).reveal() - public @ x) <= tol + U)


def test_comparisons_are_exact(session):
    x = np.array([-3.5, -1e-4, 0.0, 1e-4, 2.0, 30000.0, -30000.0, 7.25])
    y = np.array([-3.5, 0.0, 0.0, 0.0, 2.5, -30000.0, 30000.0, 7.0])
    a, b = session.share(x, owner=0), session.share(y, owner=1)
    ex, ey = np.rint(x * 2**F), np.rint(y * 2**F)  # comparisons see the encoded values
    assert (a < b).reveal().tolist() == (ex < ey).astype(int).tolist()
    assert (a > b).reveal().tolist() == (ex > ey).astype(int).tolist()
    assert (a <= b).reveal().tolist() == (ex <= ey).astype(int).tolist()
    assert (a >= b).reveal().tolist() == (ex >= ey).astype(int).tolist()
    assert (a < 0.5).reveal().tolist() == (x < 0.5).astype(int).tolist()
    assert a.sign().reveal().tolist() == np.where(ex < 0, -1, 1).tolist()
    assert np.array_equal(a.relu().reveal(), np.maximum(ex, 0) / 2**F)
    assert np.array_equal(a.abs().reveal(), np.abs(ex) / 2**F)
    big = _data(10, 2000, scale=20000)
    assert np.array_equal((session.share(big, owner=0) < 0).reveal(), (big < 0).astype(int))


def test_where_and_integers(session):
    x, y = _data(11, 6), _data(12, 6)
    a, b = session.share(x, owner=0), session.share(y, owner=1)
    picked = where(a > b, a, b).reveal()
    assert np.all(np.abs(picked - np.maximum(x, y)) <= U / 2)
    n = session.share(np.arange(6), owner=0)
    assert (n * 3 - 1).reveal().tolist() == (np.arange(6) * 3 - 1).tolist()
    mixed = (n + a).reveal()  # integer + fixed point promotes to fixed point
    assert np.all(np.abs(mixed - (np.arange(6) + x)) <= U / 2)
    assert np.all(np.abs((n * a).reveal() - np.arange(6) * x) <= np.arange(6) * U / 2)


def test_sigmoid_matches_its_reference(session):
    x = np.concatenate([np.linspace(-9, 9, 181), [-4.25, -2.4, -1.2, 0.0, 1.2, 2.4, 4.25]])
    got = session.share(x, owner=0).sigmoid().reveal()
    # 7 slope changes times |x - t| <= 14, each encoded with relative error 2^-19, the
    # inputs' encoding (slope <= 0.13 times U/2) and one truncation: well under 2 U.
    assert np.max(np.abs(got - sigmoid_reference(x))) <= 2 * U
    exact = 1 / (1 + np.exp(-x))
    assert np.max(np.abs(got - exact)) <= SIGMOID_MAX_ERROR + 2 * U


def test_sigmoid_approximation_error_is_as_stated():
    grid = np.linspace(-60, 60, 600001)
    err = np.abs(sigmoid_reference(grid) - 1 / (1 + np.exp(-grid)))
    assert err.max() <= SIGMOID_MAX_ERROR + 1e-9
    assert err.max() >= SIGMOID_MAX_ERROR - 1e-4  # the stated error is attained


def test_max_min_argmax(session):
    x = _data(13, (7, 3))
    x[2, 1] = x[5, 1] = 11.0  # a tie: the first index wins
    a = session.share(x, owner=0)
    assert np.all(np.abs(a.max(axis=0).reveal() - x.max(axis=0)) <= U / 2)
    assert np.all(np.abs(a.min(axis=0).reveal() - x.min(axis=0)) <= U / 2)
    assert a.argmax(axis=0).reveal().tolist() == x.argmax(axis=0).tolist()
    assert a.argmax(axis=1).reveal().tolist() == x.argmax(axis=1).tolist()


def test_structure_operations(session):
    x = _data(14, (3, 4))
    a = session.share(x, owner=1)
    close = {
        "T": (a.T, x.T), "reshape": (a.reshape(2, 6), x.reshape(2, 6)),
        "slice": (a[1:, ::2], x[1:, ::2]), "fancy": (a[[2, 0]], x[[2, 0]]),
        "mask": (a[np.array([True, False, True])], x[[0, 2]]), "item": (a[1, 2], x[1, 2]),
        "sum": (a.sum(), x.sum()), "sum0": (a.sum(axis=0), x.sum(axis=0)),
        "sumk": (a.sum(axis=1, keepdims=True), x.sum(axis=1, keepdims=True)),
        "mean": (a.mean(axis=1), x.mean(axis=1)),
        "concat": (concatenate([a, a], axis=1), np.concatenate([x, x], axis=1)),
        "stack": (stack([a, a]), np.stack([x, x])), "flat": (a.flatten(), x.ravel()),
        "bcast": (a[0].broadcast_to((2, 4)), np.broadcast_to(x[0], (2, 4))),
    }
    for name, (got, want) in close.items():
        value = got.reveal()
        assert got.shape == np.shape(want) and np.shape(value) == np.shape(want), name
        assert np.all(np.abs(value - want) <= 12 * U / 2 + U), name
    assert [t.shape for t in a] == [(4,)] * 3


def test_reveal_to_one_party(session):
    x = _data(15, 4)
    a = session.share(x, owner=0)
    with session.measure() as m:
        value = a.reveal(to=session.parties - 1)
    assert np.all(np.abs(value - x) <= U / 2)
    # only the receiver gets shares: every other party sends its share, nobody else receives
    assert m.cost.received[:-1] == (0,) * (session.parties - 1)
    assert m.cost.received[-1] > 0 and m.cost.rounds == (1,) * session.parties


def test_costs_are_counted(session):
    n = session.parties
    a = session.share(_data(16, 100), owner=0)
    b = session.share(_data(17, 100), owner=1)
    with session.measure() as m:
        _ = a + b * 2  # local
    assert m.cost.rounds == (0,) * n and m.cost.sent == (0,) * n
    with session.measure() as m:
        _ = a * b
    assert m.cost.rounds == (2,) * n  # Beaver opening + truncation
    # every party sends d and e (2 x 100 words) to each other party, plus headers
    assert all(s >= 2 * 800 * (n - 1) for s in m.cost.sent)
    with session.measure() as m:
        _ = a < b
    assert m.cost.rounds == (8,) * n
    assert m.cost.dealer[0] > 0 and m.cost.dealer[1:] == (0,) * (n - 1)
    assert "rounds" in str(m.cost) and m.cost.seconds >= 0


def test_deterministic_under_a_seed():
    def run():
        with Session(parties=3, rng=42) as s:
            a = s.share(_data(18, 20), owner=0)
            b = s.share(_data(19, 20), owner=2)
            return ((a * b).sigmoid() + (a < b)).reveal()
    assert np.array_equal(run(), run())


def test_bad_input():
    with Session(parties=3, rng=0) as s, Session(parties=3, rng=1) as other:
        a = s.share(np.ones((2, 3)), owner=0)
        with pytest.raises(ConfigError, match="owner=3"):
            s.share(np.ones(3), owner=3)
        with pytest.raises(ConfigError, match="to=5"):
            a.reveal(to=5)
        with pytest.raises(DataError, match="do not broadcast"):
            _ = a + s.share(np.ones(4), owner=1)
        with pytest.raises(DataError, match="do not match for @"):
            _ = a @ s.share(np.ones((2, 3)), owner=1)
        with pytest.raises(DataError, match="do not broadcast"):
            _ = a * np.ones(5)
        with pytest.raises(ProtocolError, match="another session"):
            _ = a + other.share(np.ones((2, 3)), owner=0)
        with pytest.raises(ProtocolError, match="another session"):
            _ = other.share(np.ones(3), owner=0) * s.share(np.ones(3), owner=0)
        with pytest.raises(DataError, match="fixed-point overflow"):
            s.share(np.array([1.0, 40000.0]), owner=0)
        with pytest.raises(DataError, match="fixed-point overflow"):
            _ = a * 3e9
        with pytest.raises(DataError, match="NaN"):
            s.share(np.array([np.nan]), owner=0)
        with pytest.raises(DataError, match="secret"):
            bool(a[0, 0] > 0)
        with pytest.raises(DataError, match="out of range"):
            _ = a[5]
        with pytest.raises(DataError, match="division"):
            _ = a / 0
        with pytest.raises(ConfigError, match="parties=1"):
            Session(parties=1)
        with pytest.raises(ConfigError, match="runtime="):
            Session(parties=2, runtime="threads")
        assert np.array_equal(a.reveal(), np.ones((2, 3)))  # the errors changed nothing
    with pytest.raises(ProtocolError, match="closed"):
        _ = a + 1


def test_truncation_never_fails_in_range(session):
    # Products up to 9e8 (2^62 in the ring): a mask-wrapping truncation would fail on
    # about half of these elements; the exact-wrap rule must get every one right.
    x = _data(20, 100_000, scale=30000)
    y = _data(21, 100_000, scale=30000)
    got = (session.share(x, owner=0) * session.share(y, owner=1)).reveal()
    assert np.all(np.abs(got - x * y) <= _prod_tol(x, y))


def test_overflow_is_detected_at_reveal():
    with Session(parties=2, rng=3) as s:
        a = s.share(np.array([30000.0]), owner=0)
        assert abs((a * a).reveal()[0] - 9e8) <= 30000 * U + U  # 9e8 < 2^30: still fine
        doubled = (a * a) * 2  # 1.8e9 > 2^(62 - 2f) = 2^30: beyond the representable range
        with pytest.raises(CryptoError, match="fixed-point overflow"):
            doubled.reveal()
