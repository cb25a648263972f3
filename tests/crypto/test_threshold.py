import itertools

import gmpy2
import numpy as np
import pytest

from veil.crypto import _primes, encoding, threshold
from veil.crypto.threshold import PartialDecryption
from veil.errors import ConfigError, CryptoError

BITS = 512


@pytest.fixture(scope="module")
def primes():
    """Safe primes generated once for the module (pre-generated primes path of keygen)."""
    return threshold.generate_safe_primes(BITS, insecure_ok=True, rng=31)


@pytest.fixture(scope="module")
def key(primes):
    return threshold.keygen(BITS, parties=5, threshold=3, insecure_ok=True, primes=primes,
                            rng=32)


def forged(partial, values=None, proof=None, party=None):
    return PartialDecryption(partial.public_key, partial.party if party is None else party,
                             partial.values if values is None else values,
                             partial.ciphertext_digest, partial.proof if proof is None else proof,
                             partial.ciphertext)


def test_safe_primes(primes):
    p, q = primes
    assert p != q and p.bit_length() == q.bit_length() == BITS // 2
    assert _primes.is_safe_prime(p) and _primes.is_safe_prime(q)
    assert not _primes.is_safe_prime(13)            # 13 = 2*6 + 1, 6 not prime
    assert _primes.is_safe_prime(23)                # 23 = 2*11 + 1


def test_keygen_parameters(primes):
    with pytest.raises(ConfigError, match="threshold"):
        threshold.keygen(BITS, parties=3, threshold=4, insecure_ok=True, primes=primes)
    with pytest.raises(ConfigError, match="insecure_ok"):
        threshold.keygen(BITS, parties=3, threshold=2, primes=primes)
    not_safe = _primes.random_prime(BITS // 2, rng=1)
    while _primes.is_safe_prime(not_safe):
        not_safe = _primes.random_prime(BITS // 2)
    with pytest.raises(ConfigError, match="safe prime"):
        threshold.keygen(BITS, parties=3, threshold=2, insecure_ok=True,
                         primes=(primes[0], not_safe))
    with pytest.raises(ConfigError, match="differ"):
        threshold.keygen(BITS, parties=3, threshold=2, insecure_ok=True,
                         primes=(primes[0], primes[0]))


def test_shares_match_verification_keys(key):
    tpk, shares = key
    assert [s.index for s in shares] == [1, 2, 3, 4, 5]
    for s in shares:
        s.check()
    impostor = threshold.KeyShare(tpk, 2, shares[0]._share)
    with pytest.raises(CryptoError, match="party 2 does not match"):
        impostor.check()


def test_combine_from_every_subset(key):
    tpk, shares = key
    c = tpk.encrypt(-123456789, rng=1)
    partials = [s.partial_decrypt(c) for s in shares]
    for size in (3, 4, 5):
        for subset in itertools.combinations(partials, size):
            assert tpk.combine(list(subset)) == -123456789


def test_vector_and_packed_decryption(key):
    tpk, shares = key
    x = np.arange(-6, 6).reshape(3, 4)
    e = tpk.encrypt(x, rng=2)
    out = tpk.combine([shares[i].partial_decrypt(e) for i in (4, 0, 2)])
    assert out.shape == (3, 4) and np.array_equal(out, x)
    # hybrid FL: 4 parties each encrypt a packed vector, the aggregator adds, 3 decrypt
    pack = encoding.Packing(16, 4, key_bits=tpk.bits)
    rng = np.random.default_rng(5)
    updates = [rng.integers(pack.low, pack.high + 1, 40) for _ in range(4)]
    total = tpk.encrypt(pack.pack(updates[0]))
    for u in updates[1:]:
        total = total + tpk.encrypt(pack.pack(u))
    plain = tpk.combine([s.partial_decrypt(total) for s in shares[1:4]])
    assert np.array_equal(pack.unpack(plain, 40), np.sum(updates, axis=0))


def test_too_few_or_duplicated_partials(key):
    tpk, shares = key
    c = tpk.encrypt(5)
    p = [s.partial_decrypt(c) for s in shares[:3]]
    with pytest.raises(CryptoError, match="need 3 distinct parties"):
        tpk.combine(p[:2])
    with pytest.raises(CryptoError, match="party 1 contributed more than one"):
        tpk.combine([p[0], p[1], p[0]])
    with pytest.raises(CryptoError, match="no partial"):
        tpk.combine([])


def test_forged_partial_decryption_is_caught_and_named(key):
    tpk, shares = key
    e = tpk.encrypt(np.arange(8), rng=3)
    p = [s.partial_decrypt(e) for s in shares[:3]]
    n2 = tpk.n2
    # a wrong value in one slot of party 2's vector
    values = p[1].values.copy()
    values[5] = values[5] * tpk.v % n2
    with pytest.raises(CryptoError, match="party 2: the proof of correct decryption"):
        tpk.combine([p[0], forged(p[1], values=values), p[2]])
    # party 3 re-uses party 1's honest work under its own number
    with pytest.raises(CryptoError, match="party 3: the proof"):
        tpk.combine([p[0], p[1], forged(p[0], party=3)])
    # a tampered response
    e_, z = p[2].proof
    with pytest.raises(CryptoError, match="party 3: the proof"):
        tpk.combine([p[0], p[1], forged(p[2], proof=(e_, z + 1))])
    with pytest.raises(CryptoError, match="party 3: the proof of correct decryption is malformed"):
        tpk.combine([p[0], p[1], forged(p[2], proof=(e_, -z))])
    # a partial decryption of another ciphertext
    other = shares[3].partial_decrypt(tpk.encrypt(np.arange(8)))
    with pytest.raises(CryptoError, match="party 4: the partial decryption is for a different"):
        tpk.combine([p[0], p[1], other], ciphertext=e)
    assert np.array_equal(tpk.combine(p), np.arange(8))


def test_proofs_bind_the_exact_values(key):
    """Even an order-2 change (which the squarings would make harmless) fails the proof."""
    tpk, shares = key
    c = tpk.encrypt(np.array([42, -42]))
    p = [s.partial_decrypt(c) for s in shares[:3]]
    values = p[0].values.copy()
    values[0] = tpk.n2 - values[0]                      # times -1
    with pytest.raises(CryptoError, match="party 1: the proof"):
        tpk.combine([forged(p[0], values=values), p[1], p[2]])


def test_partial_decryption_needs_this_key(key, primes):
    tpk, shares = key
    other, _ = threshold.keygen(BITS, parties=5, threshold=3, insecure_ok=True, primes=primes,
                                rng=99)
    with pytest.raises(CryptoError, match="not under this share's threshold key"):
        shares[0].partial_decrypt(other.encrypt(1))
    with pytest.raises(CryptoError, match="pass an EncryptedNumber"):
        shares[0].partial_decrypt(5)


def test_lagrange_combination_identity(key):
    """c^(4 Delta L d) = 1 + n (4 Delta L m): checked directly from the dealer's secret."""
    tpk, shares = key
    s = [int(x._share) for x in shares]
    c = tpk.encrypt(77, rng=4)
    # any 3 shares interpolate f(0) = d with integer coefficients mu_i = L lambda_i
    mus, scale = [3, -3, 1], 1        # lambda_i at 0 for parties 1, 2, 3: integers, so L = 1
    exponent = sum(mu * si for mu, si in zip(mus, s[:3]))
    value = gmpy2.powmod(c.ciphertext, 4 * tpk.delta * scale * exponent, tpk.n2)
    assert value == 1 + tpk.n * (4 * tpk.delta * scale * 77 % tpk.n)


def test_threshold_one_lets_any_single_party_decrypt(primes):
    tpk, shares = threshold.keygen(BITS, parties=2, threshold=1, insecure_ok=True,
                                   primes=primes, rng=7)
    c = tpk.encrypt(np.array([5, -6]))
    for s in shares:
        assert np.array_equal(tpk.combine([s.partial_decrypt(c)]), [5, -6])


def test_proof_nonces_are_hedged_so_no_seed_reveals_a_share(key):
    """With a seeded nonce, anyone who knew the seed recomputed r from a recorded proof and
    solved s_i = (z - r) / (e Delta). Nonces now mix the share and fresh CSPRNG bytes: two
    proofs of the same statement differ, and both verify."""
    tpk, shares = key
    c = tpk.encrypt([7, -3], rng=1)
    a, b = shares[0].partial_decrypt(c), shares[0].partial_decrypt(c)
    assert a.proof[1] != b.proof[1]
    assert list(tpk.combine([a, shares[1].partial_decrypt(c), shares[2].partial_decrypt(c)])) \
        == [7, -3]
    assert list(tpk.combine([b, shares[3].partial_decrypt(c), shares[4].partial_decrypt(c)])) \
        == [7, -3]
