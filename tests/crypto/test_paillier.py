import gmpy2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto import _primes, paillier
from veil.crypto.paillier import EncryptedArray, EncryptedNumber, NoisePool
from veil.errors import ConfigError, CryptoError

BITS = 512
FAST = settings(max_examples=40, deadline=None)


@pytest.fixture(scope="module")
def keys():
    return paillier.keygen(BITS, insecure_ok=True, rng=11)


@pytest.fixture(scope="module")
def djn_keys():
    return paillier.keygen(BITS, insecure_ok=True, short_exponents=True, rng=12)


def signed(x, pk):
    """The representative of x mod n in [-(n-1)/2, (n-1)/2] (the decryption convention)."""
    r = int(x) % int(pk.n)
    return r - int(pk.n) if r > pk.half else r


plain = st.integers(min_value=-(2 ** 200), max_value=2 ** 200)


# ----------------------------------------------------------------------------- keys

def test_keygen_refuses_small_keys_without_insecure_ok():
    with pytest.raises(ConfigError, match="insecure_ok"):
        paillier.keygen(1024)
    with pytest.raises(ConfigError, match="even"):
        paillier.keygen(513, insecure_ok=True)


def test_keygen_modulus_shape(keys):
    pk, sk = keys
    assert pk.bits == BITS and pk.n == sk.p * sk.q
    assert _primes.is_safe_prime(sk.p) and _primes.is_safe_prime(sk.q)
    assert sk.p.bit_length() == sk.q.bit_length() == BITS // 2


def test_noise_base_generates_the_jacobi_one_subgroup(keys):
    """h = -y^2 must have order 2 p' q' = |J_n| for full-length noise to be uniform on J_n."""
    pk, sk = keys
    p1, q1 = (sk.p - 1) // 2, (sk.q - 1) // 2
    h_s = pk.noise_base
    # h_s = h^n and n is coprime to |J_n|, so h_s mod n has the same order as h
    h = h_s % pk.n
    assert gmpy2.jacobi(h, pk.n) == 1
    assert gmpy2.powmod(h, 2 * p1 * q1, pk.n) == 1
    for r in (2, p1, q1):
        assert gmpy2.powmod(h, 2 * p1 * q1 // r, pk.n) != 1
    assert pk._noise_bits == BITS + 128


def test_a_relayed_key_with_a_degenerate_noise_base_is_refused(keys):
    """noise_base = n^2 - 1 made every ciphertext +-(1 + m n), readable without the key, and
    the key compared equal to the real one (its fingerprint covered n only)."""
    pk, sk = keys
    with pytest.raises(CryptoError, match="noise_base"):
        paillier.PublicKey(pk.n, noise_base=pk.n2 - 1)
    relayed = paillier.PublicKey(pk.n, noise_base=pk.noise_base * pk.noise_base % pk.n2)
    assert relayed != pk and relayed.fingerprint != pk.fingerprint
    assert paillier.PublicKey(pk.n) != pk
    assert paillier.PublicKey(pk.n, noise_base=pk.noise_base) == pk


def test_keygen_accepts_pregenerated_safe_primes(keys):
    pk, sk = keys
    pk2, sk2 = paillier.keygen(BITS, insecure_ok=True, primes=(sk.p, sk.q), rng=3)
    # same n, another noise base: another key (the fingerprint covers every parameter)
    assert pk2.n == pk.n and pk2.noise_base != pk.noise_base and pk2 != pk
    with pytest.raises(ConfigError, match="safe prime"):
        paillier.keygen(BITS, insecure_ok=True, primes=(sk.p, sk.p + 2))


def test_keygen_is_deterministic_under_a_seed_only():
    a, _ = paillier.keygen(256, insecure_ok=True, rng=5)
    b, _ = paillier.keygen(256, insecure_ok=True, rng=5)
    c, _ = paillier.keygen(256, insecure_ok=True)
    assert a == b and a != c


def test_crt_constants_match_textbook_decryption(keys):
    pk, sk = keys
    # textbook: m = L(c^lambda mod n^2) * mu mod n with lambda = phi(n), mu = phi^-1 mod n
    phi = (sk.p - 1) * (sk.q - 1)
    c = pk.encrypt(123456789, rng=1)
    textbook = (gmpy2.powmod(c.ciphertext, phi, pk.n2) - 1) // pk.n * gmpy2.invert(phi, pk.n)
    assert sk.decrypt(c) == textbook % pk.n == 123456789


# ----------------------------------------------------------------------------- scalars

@FAST
@given(a=plain, b=plain, k=st.integers(min_value=-(2 ** 70), max_value=2 ** 70))
def test_homomorphic_identities(keys, a, b, k):
    pk, sk = keys
    ea, eb = pk.encrypt(a, rng=1), pk.encrypt(b, rng=2)
    assert sk.decrypt(ea) == a
    assert sk.decrypt(ea + eb) == signed(a + b, pk)
    assert sk.decrypt(ea - eb) == signed(a - b, pk)
    assert sk.decrypt(ea + b) == sk.decrypt(b + ea) == signed(a + b, pk)
    assert sk.decrypt(b - ea) == signed(b - a, pk)
    assert sk.decrypt(-ea) == signed(-a, pk)
    assert sk.decrypt(ea * k) == sk.decrypt(k * ea) == signed(a * k, pk)


def test_plaintext_range_is_symmetric(keys):
    pk, sk = keys
    assert sk.decrypt(pk.encrypt(pk.half)) == pk.half
    assert sk.decrypt(pk.encrypt(-pk.half)) == -pk.half
    with pytest.raises(CryptoError, match="outside the plaintext range"):
        pk.encrypt(pk.half + 1)
    with pytest.raises(CryptoError, match="outside the plaintext range"):
        pk.encrypt(np.array([0, -pk.half - 1], dtype=object))
    # sums wrap modulo n (overflow detection belongs to veil.crypto.encoding)
    assert sk.decrypt(pk.encrypt(pk.half) + 1) == -pk.half


def test_encryption_is_randomized(keys):
    pk, _ = keys
    assert pk.encrypt(5).ciphertext != pk.encrypt(5).ciphertext
    a, b = pk.encrypt(5, rng=3), pk.encrypt(5, rng=3)
    assert a.ciphertext == b.ciphertext          # same seed, same noise (tests only)


def test_rejects_non_integers_and_ciphertext_products(keys):
    pk, _ = keys
    with pytest.raises(CryptoError, match="integers only"):
        pk.encrypt(np.array([1.5, 2.0]))
    with pytest.raises(CryptoError, match="integers only"):
        pk.encrypt(np.array([True, False]))
    with pytest.raises(CryptoError, match="not an integer"):
        pk.encrypt([1, "2"])
    with pytest.raises(CryptoError, match="integers only"):
        pk.encrypt(3) * 1.5
    with pytest.raises(CryptoError, match="additively homomorphic"):
        pk.encrypt(3) * pk.encrypt(4)


def test_validation_of_outside_ciphertexts(keys):
    pk, sk = keys
    for bad in (0, -5, pk.n2, pk.n2 + 7):
        with pytest.raises(CryptoError, match="0 < c < n"):
            EncryptedNumber(pk, bad)
    with pytest.raises(CryptoError, match="gcd"):
        EncryptedNumber(pk, sk.p * 12345)
    with pytest.raises(CryptoError, match=r"ciphertexts\[1\]"):
        EncryptedArray(pk, [pk.encrypt(1).ciphertext, pk.n])
    good = EncryptedNumber(pk, pk.encrypt(-77).ciphertext)
    assert sk.decrypt(good) == -77


def test_mixing_keys_is_refused(keys):
    pk, sk = keys
    other, _ = paillier.keygen(BITS, insecure_ok=True, rng=99)
    with pytest.raises(CryptoError, match="different public keys"):
        pk.encrypt(1) + other.encrypt(1)
    with pytest.raises(CryptoError, match="different public keys"):
        sk.decrypt(other.encrypt(1))
    with pytest.raises(CryptoError, match="different public keys"):
        pk.encrypt(np.arange(3)) - other.encrypt(np.arange(3))


# ----------------------------------------------------------------------------- arrays

@FAST
@given(data=st.lists(plain, min_size=1, max_size=8), k=st.integers(-1000, 1000))
def test_array_identities(keys, data, k):
    pk, sk = keys
    x = np.array(data, dtype=object)
    e = pk.encrypt(x, rng=4)
    assert isinstance(e, EncryptedArray) and e.shape == x.shape
    assert list(sk.decrypt(e)) == data
    assert list(sk.decrypt(e + e)) == [signed(2 * v, pk) for v in data]
    assert list(sk.decrypt(e * k)) == [signed(k * v, pk) for v in data]
    assert sk.decrypt(e.sum()) == signed(sum(data), pk)
    assert list(sk.decrypt(e - x)) == [0] * len(data)


def test_array_shapes_broadcasting_and_reductions(keys):
    pk, sk = keys
    x = np.arange(-6, 6).reshape(3, 4)
    e = pk.encrypt(x, rng=5)
    assert sk.decrypt(e).shape == (3, 4)
    assert np.array_equal(sk.decrypt(e + np.array([1, 2, 3, 4])), x + [1, 2, 3, 4])
    assert np.array_equal(sk.decrypt(np.array([1, 2, 3, 4]) + e), x + [1, 2, 3, 4])
    assert np.array_equal(sk.decrypt(e * np.array([[2], [0], [-1]])), x * [[2], [0], [-1]])
    assert np.array_equal(sk.decrypt(e - e[0]), x - x[0])
    assert np.array_equal(sk.decrypt(e.sum(axis=0)), x.sum(axis=0))
    assert np.array_equal(sk.decrypt(e.sum(axis=1)), x.sum(axis=1))
    assert sk.decrypt(e.sum()) == x.sum()
    assert sk.decrypt(e[1, 2]) == x[1, 2] and isinstance(e[1, 2], EncryptedNumber)
    assert np.array_equal(sk.decrypt(e.T), x.T)
    assert np.array_equal(sk.decrypt(e.reshape(2, 6)), x.reshape(2, 6))
    assert [sk.decrypt(row).tolist() for row in e] == x.tolist()
    assert np.array_equal(sk.decrypt(pk.encrypt(1) + e), x + 1)
    empty = pk.encrypt(np.zeros((0, 3), dtype=np.int64)).sum(axis=0)
    assert np.array_equal(sk.decrypt(empty), [0, 0, 0])


def test_dot_and_matmul_with_plaintext_matrices(keys):
    pk, sk = keys
    x = np.array([3, -1, 4, 1, -5])
    w = np.array([[2, 0], [7, -1], [1, 1], [0, 0], [-3, 8]])
    e = pk.encrypt(x, rng=6)
    assert np.array_equal(sk.decrypt(e.dot(w)), x @ w)
    assert np.array_equal(sk.decrypt(e @ w), x @ w)
    assert sk.decrypt(e @ w[:, 0]) == x @ w[:, 0]
    assert np.array_equal(sk.decrypt(w.T @ e), w.T @ x)
    x2 = np.arange(10).reshape(2, 5) - 4
    e2 = pk.encrypt(x2, rng=7)
    assert np.array_equal(sk.decrypt(e2 @ w), x2 @ w)
    assert np.array_equal(sk.decrypt(np.array([[1, 2], [3, -4]]) @ e2),
                          np.array([[1, 2], [3, -4]]) @ x2)
    with pytest.raises(CryptoError, match="cannot dot"):
        e.dot(np.ones((4, 2), dtype=int))


def test_ciphertext_arrays_are_read_only(keys):
    pk, _ = keys
    e = pk.encrypt(np.arange(3))
    with pytest.raises(ValueError):
        e.ciphertexts[0] = 1


# ----------------------------------------------------------------------------- noise

@pytest.fixture(scope="module")
def bare_keys(keys):
    """The same modulus as a bare-n public key (as from python-paillier): r^n / CRT noise."""
    _, sk = keys
    bare = paillier.PublicKey(sk.p * sk.q)
    return bare, paillier.PrivateKey(sk.p, sk.q, bare)


def test_every_noise_source_yields_nth_residues(keys, djn_keys, bare_keys):
    """E(0) = r^n: a noise value decrypts to 0 exactly when it is an n-th residue."""
    for pk, sk in (keys, djn_keys, bare_keys):
        for source in (pk.noise, sk.noise):
            values = source(5, rng=8)
            assert len(set(values)) == 5
            assert sk.decrypt(EncryptedArray(pk, values)).tolist() == [0] * 5
        assert sk.decrypt(pk.encrypt(np.arange(-3, 3), rng=10)).tolist() == list(range(-3, 3))
    dpk, _ = djn_keys
    assert dpk.short_exponents and dpk._noise_bits == BITS // 2


def test_crt_noise_matches_the_standard_distribution_on_the_p_side(bare_keys):
    """CRT noise mod p^2 is a^p for uniform a, i.e. the unique (p-1)-torsion lift of a."""
    pk, sk = bare_keys
    assert pk.noise_base is None
    for r in sk.noise(5, rng=13):
        assert gmpy2.powmod(r % sk.p2, sk.p - 1, sk.p2) == 1
        assert gmpy2.powmod(r % sk.q2, sk.q - 1, sk.q2) == 1


def test_pool_hands_out_each_value_once(bare_keys):
    pk, sk = bare_keys
    pool = NoisePool(pk, capacity=20, private_key=sk, rng=14)
    pool.fill()
    assert len(pool) == 20
    first = pool.take(8)
    second = pool.take(8)
    assert len(pool) == 4 and not set(first) & set(second)
    x = np.arange(-10, 10)
    e = pk.encrypt(x, pool=pool)             # 4 pooled + 16 computed on demand
    assert len(pool) == 0
    assert np.array_equal(sk.decrypt(e), x)
    assert len({int(c) for c in e.ciphertexts}) == 20
    assert sk.decrypt(pk.encrypt(-3, pool=pool)) == -3


def test_pool_background_worker_fills_and_stops(keys):
    pk, sk = keys
    with NoisePool(pk, capacity=16, rng=15) as pool:
        e = pk.encrypt(np.arange(40), pool=pool)
        assert np.array_equal(sk.decrypt(e), np.arange(40))
        for _ in range(200):
            if len(pool) == 16:
                break
            pool._stop.wait(0.01)
        assert len(pool) == 16
    assert pool._thread is None


def test_pool_checks_its_key(keys):
    pk, sk = keys
    other, other_sk = paillier.keygen(BITS, insecure_ok=True, rng=16)
    with pytest.raises(CryptoError, match="different public key"):
        pk.encrypt(1, pool=NoisePool(other))
    with pytest.raises(CryptoError, match="does not belong"):
        NoisePool(pk, private_key=other_sk)
    with pytest.raises(ConfigError, match="capacity"):
        NoisePool(pk, capacity=0)


def test_rerandomize_changes_ciphertext_not_plaintext(keys):
    pk, sk = keys
    e = pk.encrypt(np.array([4, -4]), rng=17)
    f = e.rerandomize(rng=18)
    assert np.array_equal(sk.decrypt(f), [4, -4])
    assert not set(map(int, e.ciphertexts)) & set(map(int, f.ciphertexts))
    g = pk.encrypt(9).rerandomize()
    assert sk.decrypt(g) == 9


def test_the_noise_table_widens_with_the_values_drawn_and_stays_under_its_memory_cap(
        monkeypatch):
    # a table sized for one encryption is tiny; a bulk encryption (a vertical epoch's
    # residuals) widens it; a memory cap keeps the window down; the noise stays exact
    pk, sk = paillier.keygen(BITS, insecure_ok=True, short_exponents=True, rng=3)
    assert sk.decrypt(pk.encrypt(-7)) == -7 and pk._table.window <= 4
    values = np.arange(-1000, 1000)
    assert np.array_equal(sk.decrypt(pk.encrypt(values)), values)
    assert pk._table.window >= 7
    capped = paillier.keygen(BITS, insecure_ok=True, short_exponents=True, rng=3)[0]
    monkeypatch.setattr(paillier.keys, "TABLE_BYTES", 64 * 2 * BITS // 8 * 16)
    assert np.array_equal(sk.decrypt(capped.encrypt(values)), values)
    bits, size = capped._noise_bits, (capped.n2.bit_length() + 7) // 8
    assert -(-bits // capped._table.window) << capped._table.window <= \
        paillier.keys.TABLE_BYTES // size
