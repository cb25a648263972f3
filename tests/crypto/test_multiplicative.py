import gmpy2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto import _primes
from veil.crypto import multiplicative as mult
from veil.errors import ConfigError, CryptoError

FAST = settings(max_examples=30, deadline=None)


@pytest.fixture(scope="module")
def rsa():
    return mult.rsa_keygen(768, insecure_ok=True, rng=41)


@pytest.fixture(scope="module")
def elgamal():
    group = mult.ElGamalGroup.generate(256, rng=42)
    return mult.elgamal_keygen(group=group, insecure_ok=True, rng=43)


# ----------------------------------------------------------------------------- RSA

@FAST
@given(a=st.integers(0, 2 ** 300), b=st.integers(0, 2 ** 300), k=st.integers(0, 50))
def test_rsa_multiplicative_homomorphism(rsa, a, b, k):
    pk, sk = rsa
    n = int(pk.n)
    ea, eb = pk.encrypt(a), pk.encrypt(b)
    assert sk.decrypt(ea) == a
    assert sk.decrypt(ea * eb) == a * b % n
    assert sk.decrypt(ea ** k) == pow(a, k, n)


def test_rsa_is_deterministic_hence_not_ind_cpa(rsa):
    pk, _ = rsa
    # the same plaintext always gives the same ciphertext, so a guess can be tested
    assert pk.encrypt(31337).value == pk.encrypt(31337).value == pow(31337, int(pk.e), int(pk.n))


def test_rsa_decrypts_raw_residues_and_checks_ranges(rsa):
    pk, sk = rsa
    y = 987654321
    assert pow(sk.decrypt(y), int(pk.e), int(pk.n)) == y      # D is the inverse permutation
    with pytest.raises(CryptoError, match=r"outside \[0, n\)"):
        pk.encrypt(pk.n)
    with pytest.raises(CryptoError, match="not an integer"):
        pk.encrypt(1.5)
    other, other_sk = mult.rsa_keygen(768, insecure_ok=True, rng=44)
    with pytest.raises(CryptoError, match="different key"):
        pk.encrypt(2) * other.encrypt(2)
    with pytest.raises(CryptoError, match="different key"):
        other_sk.decrypt(pk.encrypt(2))


def test_rsa_keygen_parameters():
    with pytest.raises(ConfigError, match="insecure_ok"):
        mult.rsa_keygen(1024)
    with pytest.raises(ConfigError, match="odd"):
        mult.rsa_keygen(512, e=4, insecure_ok=True)
    pk, sk = mult.rsa_keygen(512, e=3, insecure_ok=True, rng=45)
    assert pk.bits == 512 and pk.e == 3 and sk.decrypt(pk.encrypt(10)) == 10


# ----------------------------------------------------------------------------- ElGamal

def test_elgamal_multiplicative_homomorphism(elgamal):
    pk, sk = elgamal
    grp = pk.group
    a, b = grp.encode(1234), grp.encode(98765)
    ea, eb = pk.encrypt(a, rng=1), pk.encrypt(b, rng=2)
    assert sk.decrypt(ea) == a and grp.decode(sk.decrypt(ea)) == 1234
    assert sk.decrypt(ea * eb) == a * b % grp.p
    assert sk.decrypt(ea ** 5) == gmpy2.powmod(a, 5, grp.p)
    # randomized: same plaintext, different ciphertexts; rerandomization keeps the plaintext
    assert pk.encrypt(a).c1 != pk.encrypt(a).c1
    assert sk.decrypt(ea.rerandomize()) == a


def test_elgamal_messages_must_be_group_elements(elgamal):
    pk, _ = elgamal
    grp = pk.group
    non_residue = next(x for x in range(2, 100) if gmpy2.legendre(x, grp.p) == -1)
    with pytest.raises(CryptoError, match="order-q subgroup"):
        pk.encrypt(non_residue)
    assert grp.decode(grp.encode(non_residue)) == non_residue
    with pytest.raises(CryptoError, match=r"\[1, q\]"):
        grp.encode(0)


@FAST
@given(a=st.integers(-500, 500), b=st.integers(-500, 500), k=st.integers(-5, 5))
def test_exponential_elgamal_is_additive(elgamal, a, b, k):
    pk, sk = elgamal
    ea, eb = pk.encrypt_exponent(a), pk.encrypt_exponent(b)
    bounds = (-6000, 6000)
    assert sk.decrypt_exponent(ea, bounds) == a
    assert sk.decrypt_exponent(ea + eb, bounds) == a + b
    assert sk.decrypt_exponent(ea - eb, bounds) == a - b
    assert sk.decrypt_exponent(ea * k, bounds) == sk.decrypt_exponent(k * ea, bounds) == k * a


def test_exponential_elgamal_bounds(elgamal):
    pk, sk = elgamal
    c = pk.encrypt_exponent(10 ** 6)
    assert sk.decrypt_exponent(c, (0, 2 * 10 ** 6)) == 10 ** 6
    with pytest.raises(CryptoError, match="outside bounds"):
        sk.decrypt_exponent(c, (0, 999_999))
    with pytest.raises(ConfigError, match="lo <= hi"):
        sk.decrypt_exponent(c, (5, 1))
    with pytest.raises(CryptoError, match="expected a ExpElGamalCiphertext"):
        sk.decrypt_exponent(pk.encrypt(pk.group.encode(4)), (0, 10))
    with pytest.raises(CryptoError, match="cannot combine"):
        pk.encrypt(pk.group.encode(4)) * c


def test_ffdhe2048_is_rfc7919():
    grp = mult.ElGamalGroup.ffdhe2048()
    hexp = format(int(grp.p), "x")
    # the published value begins and ends like this (RFC 7919, appendix A.1)
    assert hexp.startswith("ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1")
    assert hexp.endswith("886b423861285c97ffffffffffffffff")
    assert grp.bits == 2048 and grp.g == 2 and _primes.is_safe_prime(grp.p)
    pk, sk = mult.elgamal_keygen(rng=46)
    assert pk.group is grp
    assert sk.decrypt_exponent(pk.encrypt_exponent(3) + pk.encrypt_exponent(4), (0, 10)) == 7


def test_elgamal_group_validation():
    with pytest.raises(CryptoError, match="safe prime"):
        mult.ElGamalGroup(101, 4)          # 101 = 2 * 50 + 1
    with pytest.raises(CryptoError, match="subgroup of order q"):
        mult.ElGamalGroup(23, 5)           # 5 is a non-residue mod 23
    with pytest.raises(ConfigError, match="insecure_ok"):
        mult.elgamal_keygen(group=mult.ElGamalGroup(23, 4))
