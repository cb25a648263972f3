import numpy as np
import pytest

from veil.crypto import multiplicative as mult
from veil.crypto import paillier, serialization, threshold
from veil.crypto.serialization import FORMAT, dumps, loads
from veil.errors import CryptoError


@pytest.fixture(scope="module")
def pkeys():
    return paillier.keygen(256, insecure_ok=True, short_exponents=True, rng=51)


@pytest.fixture(scope="module")
def tkeys():
    return threshold.keygen(256, parties=4, threshold=2, insecure_ok=True, rng=52)


def test_paillier_round_trips(pkeys):
    pk, sk = pkeys
    pk2 = loads(dumps(pk), insecure_ok=True)
    assert pk2 == pk and pk2.noise_base == pk.noise_base and pk2.short_exponents
    sk2 = loads(dumps(sk), public_key=pk2)
    x = np.arange(-4, 8).reshape(3, 4)
    e = pk.encrypt(x)
    e2 = loads(dumps(e), public_key=pk2)
    assert np.array_equal(e2.ciphertexts, e.ciphertexts) and e2.shape == (3, 4)
    assert np.array_equal(sk2.decrypt(e2), x)
    n = pk.encrypt(-9)
    assert sk2.decrypt(loads(dumps(n), public_key=pk2)) == -9
    full, _ = paillier.keygen(256, insecure_ok=True, rng=53)
    assert not loads(dumps(full), insecure_ok=True).short_exponents
    bare = loads(dumps(paillier.PublicKey(pk.n)), insecure_ok=True)
    assert bare.noise_base is None and bare != pk  # another noise mode: another key


def test_threshold_round_trips(tkeys):
    tpk, shares = tkeys
    tpk2 = loads(dumps(tpk), insecure_ok=True)
    assert tpk2 == tpk and tpk2.verification_keys == tpk.verification_keys
    assert tpk2.noise_base == tpk.noise_base is not None
    shares2 = [loads(dumps(s), public_key=tpk2) for s in shares]
    assert [s.index for s in shares2] == [1, 2, 3, 4]
    c = tpk.encrypt(np.array([3, -1, 4]))
    wire = [dumps(s.partial_decrypt(c)) for s in shares2[1:3]]
    partials = [loads(b, public_key=tpk2) for b in wire]
    with pytest.raises(CryptoError, match="pass ciphertext="):
        tpk2.combine(partials)
    c2 = loads(dumps(c), public_key=tpk2)
    assert np.array_equal(tpk2.combine(partials, ciphertext=c2), [3, -1, 4])


def test_multiplicative_round_trips():
    pk, sk = mult.rsa_keygen(512, insecure_ok=True, rng=54)
    pk2 = loads(dumps(pk), insecure_ok=True)
    sk2 = loads(dumps(sk), public_key=pk2)
    assert sk2.decrypt(loads(dumps(pk.encrypt(77)), public_key=pk2)) == 77
    group = mult.ElGamalGroup.generate(128, rng=55)
    epk, esk = mult.elgamal_keygen(group=group, insecure_ok=True, rng=56)
    epk2 = loads(dumps(epk), insecure_ok=True)
    esk2 = loads(dumps(esk), public_key=epk2)
    m = group.encode(5)
    assert esk2.decrypt(loads(dumps(epk.encrypt(m)), public_key=epk2)) == m
    c = loads(dumps(epk.encrypt_exponent(-3)), public_key=epk2)
    assert isinstance(c, mult.ExpElGamalCiphertext)
    assert esk2.decrypt_exponent(c, (-10, 10)) == -3


def test_every_corrupted_byte_is_rejected(pkeys):
    pk, _ = pkeys
    blob = dumps(pk.encrypt(np.arange(3)))
    for i in range(len(blob)):
        for flip in (0x01, 0x80):
            bad = bytearray(blob)
            bad[i] ^= flip
            with pytest.raises(CryptoError):
                loads(bytes(bad), public_key=pk)


def test_truncated_extended_and_foreign_bytes(pkeys):
    pk, _ = pkeys
    blob = dumps(pk)
    for bad in (blob[:-1], blob + b"\0", blob[:9], b"", b"PK\x03\x04" + blob[4:]):
        with pytest.raises(CryptoError):
            loads(bad)
    with pytest.raises(CryptoError, match="expected bytes"):
        loads("not bytes")
    with pytest.raises(CryptoError, match="version"):
        loads(blob[:4] + b"\x09" + blob[5:])
    with pytest.raises(CryptoError, match="cannot serialize"):
        dumps(object())


def test_valid_checksum_but_invalid_content_is_rejected(pkeys):
    pk, sk = pkeys
    fp = pk.fingerprint
    zero = FORMAT.frame(3, [fp, b""])                       # ciphertext 0
    with pytest.raises(CryptoError, match="0 < c < n"):
        loads(zero, public_key=pk)
    not_unit = FORMAT.frame(3, [fp, int(sk.p).to_bytes(16, "big")])
    with pytest.raises(CryptoError, match="gcd"):
        loads(not_unit, public_key=pk)
    with pytest.raises(CryptoError, match="number of fields"):
        loads(FORMAT.frame(3, [fp]), public_key=pk)
    with pytest.raises(CryptoError, match="unknown type tag 99"):
        loads(FORMAT.writer().u8(99).blob(b"").finish())
    short_array = FORMAT.frame(4, [fp, b"\x01" + (2).to_bytes(8, "little"), b"\x01" * 10])
    with pytest.raises(CryptoError, match="bytes of ciphertexts for 2 entries"):
        loads(short_array, public_key=pk)
    huge_shape = FORMAT.frame(4, [fp, b"\x02" + (2 ** 40).to_bytes(8, "little") * 2, b""])
    with pytest.raises(CryptoError, match="more than"):
        loads(huge_shape, public_key=pk)
    huge_int = FORMAT.frame(3, [fp, b"\x01" * 5000])
    with pytest.raises(CryptoError, match="an integer of 5000 bytes"):
        loads(huge_int, public_key=pk)
    wrong_primes = FORMAT.frame(2, [fp, (7).to_bytes(1, "big"), (11).to_bytes(1, "big")])
    with pytest.raises(CryptoError, match="does not match"):
        loads(wrong_primes, public_key=pk)


def test_private_parts_need_the_matching_public_key(pkeys, tkeys):
    pk, sk = pkeys
    tpk, shares = tkeys
    with pytest.raises(CryptoError, match="needs public_key="):
        loads(dumps(sk))
    other, _ = paillier.keygen(256, insecure_ok=True, rng=57)
    with pytest.raises(CryptoError, match="different key"):
        loads(dumps(sk), public_key=other)
    with pytest.raises(CryptoError, match="ThresholdPublicKey"):
        loads(dumps(shares[0]), public_key=pk)
    # a share whose number was changed no longer matches its verification key
    forged = FORMAT.frame(6, [tpk.fingerprint, (2).to_bytes(1, "big"),
                        int(shares[0]._share).to_bytes(64, "big")])
    with pytest.raises(CryptoError, match="does not match its verification key"):
        loads(forged, public_key=tpk)


def test_blobs_are_versioned():
    assert serialization.VERSION == 2
    pk, _ = paillier.keygen(256, insecure_ok=True, rng=58)
    blob = dumps(pk)
    assert blob[:4] == b"VCRY" and blob[4] == 2 and blob[5] == 1
    with pytest.raises(CryptoError, match="magic"):   # a version-1 blob
        loads(b"VEIL\x01" + blob[5:])


def test_peer_keys_are_bounded_before_use(tkeys):
    """A 100 kB threshold key blob made a 79 MiB table (no bound on parties); a 23-bit
    ElGamal group and small RSA moduli were accepted from a peer."""
    from veil._codec import Format  # noqa: F401 (the blob layout is veil's own)
    from veil.crypto import multiplicative as mult

    tpk, _ = tkeys
    with pytest.raises(CryptoError, match="at least 2048"):
        loads(dumps(tpk))                                  # a test-size key from a peer
    small_rsa = mult.RSAPublicKey(2 ** 255 + 1 - 2, 65537)
    with pytest.raises(CryptoError, match="at least 2048"):
        loads(dumps(small_rsa))
    with pytest.raises(CryptoError, match="at least 128"):
        loads(dumps(mult.ElGamalPublicKey(mult.ElGamalGroup(23, 4), 9)), insecure_ok=True)
    with pytest.raises(CryptoError, match="parties"):
        threshold.ThresholdPublicKey(tpk.n, parties=threshold.MAX_PARTIES + 1, threshold=2,
                                     v=tpk.v, verification_keys=[tpk.v] * 1001)
