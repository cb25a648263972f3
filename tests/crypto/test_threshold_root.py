"""Root decryption (threshold RSA inversion of c mod n): correct, verifiable, named culprits."""

import itertools

import gmpy2
import numpy as np
import pytest

from veil.crypto import encoding, serialization, threshold
from veil.crypto.threshold import PartialDecryption
from veil.errors import CryptoError

BITS = 512


@pytest.fixture(scope="module")
def key():
    primes = threshold.generate_safe_primes(BITS, insecure_ok=True, rng=81)
    return threshold.keygen(BITS, parties=5, threshold=3, insecure_ok=True, primes=primes,
                            rng=82)


def forged(partial, values=None, proof=None, party=None, method=None):
    return PartialDecryption(partial.public_key, partial.party if party is None else party,
                             partial.values if values is None else values,
                             partial.ciphertext_digest, partial.proof if proof is None else proof,
                             partial.ciphertext, partial.method if method is None else method)


def test_root_shares_invert_x_to_the_n(key):
    """The dealer's root secret: any 3 shares interpolate d_R with (x^n)^(d_R) = x on QR_n,
    and the combination yields r^(4 Delta L) for c = (1 + n)^M r^n."""
    tpk, shares = key
    n = tpk.n
    x = gmpy2.powmod(12345, 2, n)
    mus = [3, -3, 1]                                   # Lagrange at 0 for parties 1, 2, 3
    exponent = sum(mu * int(s._root) for mu, s in zip(mus, shares[:3]))
    assert gmpy2.powmod(gmpy2.powmod(x, n, n), exponent, n) == x
    r = gmpy2.mpz(987654321)
    c = (1 + 5 * n) * gmpy2.powmod(r, n, n * n) % (n * n)   # M = 5
    partials = [s.partial_decrypt(threshold.EncryptedNumber(tpk, c), method="root")
                for s in shares[:3]]
    w = 1
    for p, mu in zip(partials, mus):
        w = w * gmpy2.powmod(p.values.item(), 2 * mu, n) % n
    assert w == gmpy2.powmod(r, 4 * tpk.delta, n)
    assert tpk.combine(partials) == 5


def test_root_combine_from_every_subset_equals_dj(key):
    tpk, shares = key
    c = tpk.encrypt(np.array([-123456789, 0, 7, tpk.half, -tpk.half]), rng=1)
    expected = tpk.combine([s.partial_decrypt(c, method="dj") for s in shares[:3]])
    partials = [s.partial_decrypt(c, method="root") for s in shares]
    assert all(0 < v < tpk.n for p in partials for v in p.values.tolist())
    for size in (3, 4, 5):
        for subset in itertools.combinations(partials, size):
            assert list(tpk.combine(list(subset))) == list(expected)
    assert list(expected) == [-123456789, 0, 7, tpk.half, -tpk.half]


def test_root_packed_sum_through_serialization(key):
    tpk, shares = key
    pack = encoding.Packing(16, 4, key_bits=tpk.bits)
    rng = np.random.default_rng(5)
    updates = [rng.integers(pack.low, pack.high + 1, 40) for _ in range(4)]
    total = tpk.encrypt(pack.pack(updates[0]))
    for u in updates[1:]:
        total = total + tpk.encrypt(pack.pack(u))
    tpk2 = serialization.loads(serialization.dumps(tpk), insecure_ok=True)  # a test-size key
    assert tpk2 == tpk and tpk2.root_keys == tpk.root_keys
    shares2 = [serialization.loads(serialization.dumps(s), public_key=tpk2) for s in shares]
    blobs = [serialization.dumps(s.partial_decrypt(total, method="root")) for s in shares2[1:4]]
    partials = [serialization.loads(b, public_key=tpk) for b in blobs]
    assert all(p.method == "root" for p in partials)
    plain = tpk.combine(partials, ciphertext=total)
    assert np.array_equal(pack.unpack(plain, 40), np.sum(updates, axis=0))


def test_bad_root_partial_is_named(key):
    tpk, shares = key
    n = tpk.n
    e = tpk.encrypt(np.arange(8), rng=3)
    p = [s.partial_decrypt(e, method="root") for s in shares[:3]]
    values = p[1].values.copy()
    values[5] = values[5] * (tpk.v % n) % n                 # a wrong value in one slot
    with pytest.raises(CryptoError, match="party 2: the proof of correct decryption"):
        tpk.combine([p[0], forged(p[1], values=values), p[2]])
    values = p[0].values.copy()
    values[0] = n - values[0]                               # times -1: order 2
    with pytest.raises(CryptoError, match="party 1: the proof"):
        tpk.combine([forged(p[0], values=values), p[1], p[2]])
    values[0] = values[0] + n                               # the same residue, out of range
    with pytest.raises(CryptoError, match="party 1: the partial decryption holds a value"):
        tpk.combine([forged(p[0], values=values), p[1], p[2]])
    with pytest.raises(CryptoError, match="party 3: the proof"):
        tpk.combine([p[0], p[1], forged(p[0], party=3)])
    e_, z = p[2].proof
    with pytest.raises(CryptoError, match="party 3: the proof"):
        tpk.combine([p[0], p[1], forged(p[2], proof=(e_, z + 1))])
    # a DJ proof presented as a root one (and vice versa) does not verify
    dj = shares[2].partial_decrypt(e, method="dj")
    with pytest.raises(CryptoError, match="party 3: the"):
        tpk.combine([p[0], p[1], forged(dj, method="root")])
    with pytest.raises(CryptoError, match="different methods"):
        tpk.combine([p[0], p[1], dj])
    with pytest.raises(CryptoError, match="unknown partial-decryption method"):
        tpk.verify(forged(p[2], method="rsa"), e)
    assert np.array_equal(tpk.combine(p), np.arange(8))


def test_keys_without_root_material_refuse_the_root_method(key):
    tpk, shares = key
    old = threshold.ThresholdPublicKey(tpk.n, parties=5, threshold=3, v=tpk.v,
                                       verification_keys=tpk.verification_keys,
                                       noise_base=tpk.noise_base)
    share = threshold.KeyShare(old, 1, shares[0]._share)
    share.check()
    c = old.encrypt(4)
    with pytest.raises(CryptoError, match="no root-decryption keys"):
        share.partial_decrypt(c, method="root")
    assert old.combine([threshold.KeyShare(old, i + 1, s._share).partial_decrypt(c)
                        for i, s in enumerate(shares[:3])]) == 4
    with pytest.raises(CryptoError, match="root key share of party 2 does not match"):
        threshold.KeyShare(tpk, 2, shares[1]._share, shares[0]._root).check()
    with pytest.raises(Exception, match="method"):
        shares[0].partial_decrypt(c, method="crt")
