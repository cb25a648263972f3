"""Additive and Shamir secret sharing: round trips, privacy shape, consistency checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto import sharing
from veil.crypto.sharing import PRIME, ShamirShare
from veil.errors import ConfigError, CryptoError, DataError

int64s = st.integers(-(2**63), 2**63 - 1)
field = st.integers(0, PRIME - 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(int64s, min_size=1, max_size=20), st.integers(2, 7), st.integers(0, 2**32))
def test_additive_round_trip(values, parties, seed):
    shares = sharing.additive_share(np.array(values, dtype=np.int64), parties, rng=seed)
    assert len(shares) == parties
    assert all(s.dtype == np.uint64 and s.shape == (len(values),) for s in shares)
    assert sharing.additive_reconstruct(shares, signed=True).tolist() == values


def test_additive_shares_look_uniform():
    # Any n-1 shares are uniform: the mean of uniform 64-bit words is 2^63 with standard
    # deviation 2^64 / sqrt(12 n); 6 sigma for n = 20000 is 0.0122 * 2^64.
    shares = sharing.additive_share(np.zeros(20000, dtype=np.int64), 3, rng=1)
    for s in shares[:2]:
        assert abs(s.astype(np.float64).mean() / 2**64 - 0.5) < 0.0122
    assert not np.array_equal(shares[0], shares[1])


def test_additive_bad_input():
    with pytest.raises(DataError, match="dtype float64"):
        sharing.additive_share(np.array([0.5]), 2)
    with pytest.raises(ConfigError, match="parties=1"):
        sharing.additive_share(np.array([1]), 1)
    with pytest.raises(DataError, match="shape"):
        sharing.additive_reconstruct([np.zeros(2, np.uint64), np.zeros(3, np.uint64)])
    with pytest.raises(CryptoError, match="at least 2"):
        sharing.additive_reconstruct([np.zeros(2, np.uint64)])


def test_field_multiplication_is_exact():
    rng = np.random.default_rng(0)
    a = rng.integers(0, PRIME, 3000, dtype=np.uint64)
    b = rng.integers(0, PRIME, 3000, dtype=np.uint64)
    edge = np.array([0, 1, 2, 2**32 - 1, 2**32, 2**60, PRIME - 2, PRIME - 1], dtype=np.uint64)
    a = np.concatenate([a, np.repeat(edge, edge.size)])
    b = np.concatenate([b, np.tile(edge, edge.size)])
    expected = [int(x) * int(y) % PRIME for x, y in zip(a, b)]
    assert sharing._mul(a, b).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(field, min_size=1, max_size=8), st.integers(1, 9), st.data())
def test_shamir_any_t_shares_reconstruct(values, parties, data):
    threshold = data.draw(st.integers(1, parties))
    seed = data.draw(st.integers(0, 2**32))
    shares = sharing.shamir_share(np.array(values, dtype=np.uint64), parties, threshold, rng=seed)
    subset = data.draw(st.lists(st.sampled_from(shares), min_size=threshold, max_size=parties,
                                unique_by=lambda s: s.x))
    assert sharing.shamir_reconstruct(subset).tolist() == values


def test_shamir_fewer_than_t_shares_reveal_nothing():
    # t - 1 = 2 shares of the secrets 0 and PRIME - 1 have the same distribution: each share
    # value is uniform on GF(p); compare the mean of their top bits (binomial, 6 sigma).
    n = 20000
    for secret in (0, PRIME - 1):
        shares = sharing.shamir_share(np.full(n, secret, dtype=np.uint64), 5, 3, rng=secret % 97)
        for s in shares[:2]:
            top = (s.values >> np.uint64(60)).astype(np.float64)
            assert abs(top.mean() - 0.5) < 6 * 0.5 / np.sqrt(n)
    with pytest.raises(CryptoError, match="threshold 3"):
        sharing.shamir_reconstruct(shares[:2])


def test_shamir_detects_inconsistent_share():
    shares = sharing.shamir_share(np.arange(6, dtype=np.uint64), 5, 3, rng=2)
    bad_values = shares[4].values.copy()
    bad_values[3] = (bad_values[3] + np.uint64(1)) % np.uint64(PRIME)
    forged = ShamirShare(5, 3, bad_values, shares[4].tag)
    for subset in itertools.combinations(shares[:4], 3):
        with pytest.raises(CryptoError, match="x=5 is not on the polynomial"):
            sharing.shamir_reconstruct([*subset, forged])
    # Exactly t shares cannot be checked: a forged share gives a wrong secret silently.
    assert sharing.shamir_reconstruct([shares[0], shares[1], forged]).tolist() != list(range(6))


def _lagrange_at(xs, ys, at):
    """The textbook formula, one Python integer at a time: sum_j y_j prod_{m != j}
    (at - x_m) / (x_j - x_m) mod p."""
    total = 0
    for j, xj in enumerate(xs):
        num = den = 1
        for m, xm in enumerate(xs):
            if m != j:
                num, den = num * (at - xm) % PRIME, den * (xj - xm) % PRIME
        total += ys[j] * num * pow(den, -1, PRIME)
    return total % PRIME


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 6), st.integers(0, 4), st.booleans(),
       st.integers(0, 2**32))
def test_vectorized_reconstruction_equals_scalar_formula(t, beyond, size, large_x, seed):
    # Random points (small, or anywhere in GF(p)) on a random polynomial of degree < t: the
    # secret and the weight matrix are the scalar formula through the first t points, and
    # an extra point moved off the polynomial is named.
    rng = np.random.default_rng(seed)
    n = t + beyond
    pool = rng.integers(1, PRIME, 4 * n) if large_x else np.arange(1, 3 * n + 2)
    xs = [int(x) for x in rng.permutation(np.unique(pool))[:n]]
    coeffs = rng.integers(0, PRIME, (t, size), dtype=np.uint64)
    ys = [[sum(int(c) * pow(x, k, PRIME) for k, c in enumerate(coeffs[:, i])) % PRIME
           for i in range(size)] for x in xs]
    tag = bytes(16)
    shares = [ShamirShare(x, t, np.array(y, dtype=np.uint64).reshape(size), tag) for x, y in
              zip(xs, ys)]
    expected = [_lagrange_at(xs[:t], [y[i] for y in ys[:t]], 0) for i in range(size)]
    assert sharing.shamir_reconstruct(shares).tolist() == expected == coeffs[0].tolist()
    weights = sharing._lagrange(tuple(xs[:t]), (0, *xs[t:]))
    for e, at in enumerate((0, *xs[t:])):
        for j in range(t):
            unit = [int(j == m) for m in range(t)]
            assert int(weights[e, j]) == _lagrange_at(xs[:t], unit, at)
    if beyond and size:
        k = int(rng.integers(t, n))
        i = int(rng.integers(size))
        bad = shares[k].values.copy()
        bad[i] = (int(bad[i]) + int(rng.integers(1, PRIME))) % PRIME
        shares[k] = ShamirShare(xs[k], t, bad, tag)
        with pytest.raises(CryptoError, match=f"x={xs[k]} is not on the polynomial"):
            sharing.shamir_reconstruct(shares)


def test_field_matrix_product_is_exact():
    # Several column chunks (about 2^20 products each) and the extreme field elements.
    rng = np.random.default_rng(5)
    w = rng.integers(0, PRIME, (3, 40), dtype=np.uint64)
    w[0] = PRIME - 1
    y = rng.integers(0, PRIME, (40, 20000), dtype=np.uint64)
    y[:, 0] = PRIME - 1
    got = sharing._dot(w, y)
    cols = [0, 1, 8737, 8738, 19999]
    for r in range(3):
        for c in cols:
            assert int(got[r, c]) == sum(int(a) * int(b) for a, b in zip(w[r], y[:, c])) % PRIME


def test_reconstruction_uses_the_first_t_shares_and_names_a_bad_one():
    # 90 holders, threshold 50 (SecAgg's complete graph with 100 clients): a corrupted
    # share in the base shifts the polynomial, so the first extra share is named.
    shares = sharing.split_bytes(bytes(range(32)), 90, 50, rng=6)
    assert sharing.combine_bytes(shares[::-1]) == bytes(range(32))
    bad = shares[10].values.copy()
    bad[2] ^= np.uint64(1)
    forged = ShamirShare(11, 50, bad, shares[10].tag, 32)
    with pytest.raises(CryptoError, match="x=51 is not on the polynomial"):
        sharing.combine_bytes([*shares[:10], forged, *shares[11:]])
    too_big = ShamirShare(11, 50, np.full(5, PRIME, dtype=np.uint64), shares[10].tag, 32)
    with pytest.raises(CryptoError, match=r"shares\[10\] holds values outside"):
        sharing.combine_bytes([*shares[:10], too_big, *shares[11:]])


def test_shamir_rejects_mixed_dealings_and_duplicates():
    a = sharing.shamir_share(np.array([1, 2]), 4, 2, rng=3)
    b = sharing.shamir_share(np.array([1, 2]), 4, 2, rng=4)
    with pytest.raises(CryptoError, match="different dealing"):
        sharing.shamir_reconstruct([a[0], b[1]])
    with pytest.raises(CryptoError, match="duplicate"):
        sharing.shamir_reconstruct([a[0], a[0]])
    with pytest.raises(DataError, match="outside"):
        sharing.shamir_share(np.array([PRIME]), 3, 2)
    with pytest.raises(DataError, match="outside"):
        sharing.shamir_share(np.array([-1]), 3, 2)
    with pytest.raises(ConfigError, match="threshold=4"):
        sharing.shamir_share(np.array([1]), 3, 4)


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=70), st.integers(1, 12), st.data())
def test_bytes_round_trip_through_messages(secret, parties, data):
    threshold = data.draw(st.integers(1, parties))
    shares = sharing.split_bytes(secret, parties, threshold, rng=data.draw(st.integers(0, 99)))
    wire = [ShamirShare.from_bytes(s.to_bytes()) for s in shares]
    subset = data.draw(st.permutations(wire))[: data.draw(st.integers(threshold, parties))]
    assert sharing.combine_bytes(subset) == secret


def test_bytes_seed_t_of_n_any_subset():
    # The secure-aggregation use: a 32-byte seed shared 3-of-5; every 3-subset works.
    seed = bytes(range(100, 132))
    shares = sharing.split_bytes(seed, 5, 3, rng=5)
    for subset in itertools.combinations(shares, 3):
        assert sharing.combine_bytes(subset) == seed
    assert [len(s.values) for s in shares] == [5] * 5


def test_bytes_errors():
    shares = sharing.split_bytes(b"secret key", 4, 2, rng=6)
    with pytest.raises(CryptoError, match="not made by split_bytes"):
        sharing.combine_bytes(sharing.shamir_share(np.array([1, 2]), 3, 2, rng=0))
    with pytest.raises(DataError, match="expected bytes"):
        sharing.split_bytes("text", 3, 2)
    raw = shares[0].to_bytes()
    with pytest.raises(CryptoError, match="malformed"):
        ShamirShare.from_bytes(raw[:-3])
    with pytest.raises(CryptoError, match="malformed"):
        ShamirShare.from_bytes(b"XXXX" + raw[4:])
    too_big = bytearray(raw)
    too_big[-8:] = (2**64 - 1).to_bytes(8, "little")
    with pytest.raises(CryptoError, match="outside GF"):
        ShamirShare.from_bytes(bytes(too_big))


def _same(a: ShamirShare, b: ShamirShare) -> bool:
    return (a.x, a.threshold, a.tag, a.length, a.values.dtype, a.values.tolist()) == \
        (b.x, b.threshold, b.tag, b.length, b.values.dtype, b.values.tolist())


def test_shares_from_bytes_parses_a_batch_as_one_by_one():
    """The batch parser (SecAgg's server reads ~9,000 shares per round) must give exactly
    what ShamirShare.from_bytes gives for every frame, and refuse what it refuses, with its
    error: a frame that differs from the first of its length anywhere but x, the tag and the
    values (here: another threshold, a flipped kind byte), x = 0 or a value >= p."""
    seeds = [sharing.split_bytes(bytes([k]) * 32, 9, 5, rng=k) for k in range(4)]
    small = sharing.shamir_share(np.arange(6, dtype=np.uint64).reshape(2, 3), 4, 2, rng=9)
    frames = [s.to_bytes() for dealing in seeds for s in dealing] + \
        [s.to_bytes() for s in small] + [sharing.split_bytes(b"x", 3, 2, rng=1)[0].to_bytes()]
    got = sharing.shares_from_bytes(frames)
    assert len(got) == len(frames)
    assert all(_same(g, ShamirShare.from_bytes(f)) for g, f in zip(got, frames))
    assert sharing.combine_bytes(got[9:14]) == bytes([1]) * 32
    other_threshold = sharing.split_bytes(bytes(32), 9, 4, rng=5)[0].to_bytes()
    mixed = sharing.shares_from_bytes([frames[0], other_threshold])
    assert mixed[1].threshold == 4 and _same(mixed[1], ShamirShare.from_bytes(other_threshold))
    base = frames[1]
    kind = bytearray(base)
    kind[13] = 7                                   # the kind byte: neither 0 nor 1
    zero_x = bytearray(base)
    zero_x[5:9] = bytes(4)
    big = bytearray(base)
    big[-8:] = (2**64 - 1).to_bytes(8, "little")
    for bad, match in ((kind, "kind 7"), (zero_x, "x=0"), (big, "outside GF")):
        with pytest.raises(CryptoError, match=match):
            ShamirShare.from_bytes(bytes(bad))
        with pytest.raises(CryptoError, match=match):
            sharing.shares_from_bytes([frames[0], bytes(bad)])
    assert sharing.shares_from_bytes([]) == []


def test_combine_bytes_many_equals_one_by_one_and_names_a_bad_dealing():
    """Dealings at the same points are interpolated together; the result must be each
    dealing's own, whatever the points (shared, different, in another order, more than t),
    and a dealing with a share off its polynomial must still be refused."""
    secrets = [bytes([k]) * 32 for k in range(6)]
    dealings = [sharing.split_bytes(s, 12, 5, rng=k) for k, s in enumerate(secrets)]
    picks = [d[:9] for d in dealings[:3]] + [dealings[3][2:8], dealings[4][::-1],
                                             dealings[5][:5]]
    assert sharing.combine_bytes_many(picks) == secrets
    assert sharing.combine_bytes_many([]) == []
    bad = picks[1][7].values.copy()
    bad[0] ^= np.uint64(1)
    picks[1] = [*picks[1][:7], ShamirShare(8, 5, bad, picks[1][7].tag, 32), picks[1][8]]
    with pytest.raises(CryptoError, match="x=8 is not on the polynomial"):
        sharing.combine_bytes_many(picks)
    with pytest.raises(CryptoError, match="threshold 5 are needed"):
        sharing.combine_bytes_many([dealings[0][:9], dealings[1][:4]])
