import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto import encoding, paillier
from veil.errors import ConfigError, CryptoError, DataError

FAST = settings(max_examples=40, deadline=None)


@pytest.fixture(scope="module")
def keys():
    return paillier.keygen(512, insecure_ok=True, rng=21)


# ----------------------------------------------------------------------------- fixed point

@FAST
@given(x=st.lists(st.floats(-1000, 1000, allow_nan=False), min_size=1, max_size=20),
       frac=st.integers(0, 30))
def test_fixed_point_round_trip_error_is_half_a_step(x, frac):
    fp = encoding.FixedPoint(frac_bits=frac, int_bits=11)
    back = fp.decode(fp.encode(x))
    # round-to-nearest: |x - round(x 2^f) 2^-f| <= 2^-(f+1)
    assert np.all(np.abs(back - np.array(x)) <= 2.0 ** -(frac + 1))


def test_fixed_point_through_paillier_sums_and_products(keys):
    pk, sk = keys
    fp = encoding.FixedPoint(frac_bits=20, int_bits=20)
    fp.check_capacity(pk, summands=8, factors=2)
    x = np.array([[1.25, -3.5, 1000.0], [0.001, -0.002, 7.75]])
    e = pk.encrypt(fp.encode(x))
    total = fp.decode(sk.decrypt(e.sum(axis=0)), summands=2)
    # each encoding is off by <= 2^-21, a sum of 2 by <= 2^-20
    assert np.allclose(total, x.sum(axis=0), rtol=0, atol=2.0 ** -20)
    w = np.array([0.5, -2.0, 0.125])
    prod = fp.decode(sk.decrypt(e * fp.encode(w)), factors=2)
    # |x w - x~ w~| <= |x| dw + |w| dx + dx dw with d = 2^-21
    assert np.allclose(prod, x * w, rtol=0, atol=1001 * 2.0 ** -21 + 2 * 2.0 ** -21)


def test_fixed_point_overflow_is_detected_never_wrapped(keys):
    pk, sk = keys
    fp = encoding.FixedPoint(frac_bits=10, int_bits=10)
    with pytest.raises(CryptoError, match="outside the fixed-point range"):
        fp.encode([1.0, 1024.5])
    with pytest.raises(DataError, match="NaN"):
        fp.encode([np.nan])
    e = pk.encrypt(fp.encode([1000.0]))
    too_many = e * 3                       # 3000 > 2^10: more than one summand's range
    with pytest.raises(CryptoError, match="overflow"):
        fp.decode(sk.decrypt(too_many))
    assert fp.decode(sk.decrypt(too_many), summands=3)[0] == 3000.0
    wrapped = pk.encrypt(pk.half) + e      # wraps modulo n to a huge negative number
    with pytest.raises(CryptoError, match="overflow"):
        fp.decode(sk.decrypt(wrapped), summands=10 ** 6)


def test_fixed_point_parameters():
    with pytest.raises(ConfigError, match="<= 62"):
        encoding.FixedPoint(frac_bits=40, int_bits=30)
    with pytest.raises(ConfigError, match="frac_bits"):
        encoding.FixedPoint(frac_bits=-1)
    fp = encoding.FixedPoint(frac_bits=60, int_bits=2)
    pk, _ = paillier.keygen(128, insecure_ok=True, rng=1)
    with pytest.raises(ConfigError, match="would wrap"):
        fp.check_capacity(pk, summands=4, factors=3)


# ----------------------------------------------------------------------------- packing

def test_packing_geometry():
    p = encoding.Packing(16, 10, key_bits=2048)
    assert p.slot_bits == 16 + 4 + 1 and p.slots == 2047 // 21 == 97
    assert p.slots * p.slot_bits <= 2048 - 1
    assert encoding.Packing(8, 1, key_bits=2048).slot_bits == 9
    assert encoding.Packing(8, 2, key_bits=2048).slot_bits == 10
    assert p.plaintexts_needed(10_000) == 104
    with pytest.raises(ConfigError, match="62"):
        encoding.Packing(60, 100, key_bits=2048)


@FAST
@given(bits=st.integers(2, 24), summands=st.integers(1, 40), count=st.integers(0, 60),
       seed=st.integers(0, 2 ** 32))
def test_pack_unpack_round_trip(bits, summands, count, seed):
    p = encoding.Packing(bits, summands, key_bits=256)
    rng = np.random.default_rng(seed)
    v = rng.integers(p.low, p.high + 1, count)
    v[: count // 4] = p.low                     # include both extremes
    v[count // 4: count // 2] = p.high
    packed = p.pack(v)
    assert len(packed) == p.plaintexts_needed(count)
    assert np.array_equal(p.unpack(packed, count), v)


def test_packed_sums_at_maximum_headroom(keys):
    pk, sk = keys
    k = 12
    p = encoding.Packing(16, k, key_bits=pk.bits)
    count = 2 * p.slots + 5
    for extreme in (p.low, p.high):
        cts = [pk.encrypt(p.pack(np.full(count, extreme))) for _ in range(k)]
        total = cts[0]
        for c in cts[1:]:
            total = total + c
        assert np.array_equal(p.unpack(sk.decrypt(total), count), np.full(count, k * extreme))


def test_packed_random_sums_and_scalar_multiples(keys):
    pk, sk = keys
    p = encoding.Packing(12, 8, key_bits=pk.bits)
    rng = np.random.default_rng(3)
    parts = [rng.integers(p.low, p.high + 1, 50) for _ in range(4)]
    enc = [pk.encrypt(p.pack(v)) for v in parts]
    total = enc[0] + enc[1] + enc[2] + enc[3]
    assert np.array_equal(p.unpack(sk.decrypt(total), 50), np.sum(parts, axis=0))
    # multiplying by 2 uses 2 of the 8 summands of headroom per ciphertext
    assert np.array_equal(p.unpack(sk.decrypt(total * 2), 50), 2 * np.sum(parts, axis=0))
    assert np.array_equal(p.unpack(sk.decrypt(enc[0] - enc[1]), 50), parts[0] - parts[1])


def test_packing_overflow_is_detected_per_slot(keys):
    pk, sk = keys
    k = 4
    p = encoding.Packing(10, k, key_bits=pk.bits)
    v = np.zeros(30, dtype=np.int64)
    v[17] = p.high
    one = pk.encrypt(p.pack(v))
    # up to 2K summands stay carry-free thanks to the guard bit: all detected, slot named
    for extra in range(1, k + 1):
        with pytest.raises(CryptoError, match="value 17 overflowed"):
            p.unpack(sk.decrypt(one * (k + extra)), 30)
    assert p.unpack(sk.decrypt(one * k), 30)[17] == k * p.high


def test_packing_input_and_count_checks():
    p = encoding.Packing(8, 2, key_bits=256)
    with pytest.raises(CryptoError, match="outside the 8-bit range"):
        p.pack([0, 128])
    with pytest.raises(CryptoError, match="integers"):
        p.pack([0.5])
    # unsigned values are checked before any cast: 2^64 - 1 is not -1
    with pytest.raises(CryptoError, match="values\\[1\\]=18446744073709551615"):
        p.pack(np.array([3, 2**64 - 1], dtype=np.uint64))
    assert p.unpack(p.pack(np.array([0, 127], dtype=np.uint64)), 2).tolist() == [0, 127]
    packed = p.pack(np.arange(-5, 5))
    with pytest.raises(CryptoError, match="need"):
        p.unpack(packed, 10 + p.slots)
    tampered = packed.copy()
    tampered[-1] += 1 << (p.slot_bits * (p.slots - 1))        # a value in a padding slot
    with pytest.raises(CryptoError, match="padding"):
        p.unpack(tampered, 10)
    with pytest.raises(CryptoError, match="top slot"):
        p.unpack(np.array([1 << (p.slot_bits * p.slots)], dtype=object), 3)
