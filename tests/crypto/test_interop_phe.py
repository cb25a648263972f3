"""python-paillier (phe, GPLv3) interoperability: a test-only import, never used by veil."""

import numpy as np
import pytest

from veil.crypto import paillier
from veil.crypto.paillier import EncryptedArray, EncryptedNumber

phe = pytest.importorskip("phe")


@pytest.fixture(scope="module")
def keys():
    pk, sk = paillier.keygen(1024, insecure_ok=True, rng=61)
    ppk = phe.PaillierPublicKey(int(pk.n))          # phe also uses g = n + 1
    psk = phe.PaillierPrivateKey(ppk, int(sk.p), int(sk.q))
    return pk, sk, ppk, psk


VALUES = [0, 1, -1, 123456789, -987654321, 2 ** 200, -(2 ** 300)]


def test_phe_ciphertexts_decrypt_with_veil(keys):
    pk, sk, ppk, _ = keys
    for m in VALUES:
        c = ppk.encrypt(m)
        assert c.exponent == 0                          # integers carry no scaling exponent
        assert sk.decrypt(EncryptedNumber(pk, c.ciphertext())) == m
    raw = [ppk.encrypt(m).ciphertext() for m in VALUES]
    assert sk.decrypt(EncryptedArray(pk, raw)).tolist() == VALUES


def test_veil_ciphertexts_decrypt_with_phe(keys):
    pk, _, ppk, psk = keys
    for m in VALUES:
        c = pk.encrypt(m)
        assert psk.decrypt(phe.EncryptedNumber(ppk, c.ciphertext, exponent=0)) == m
    for c, m in zip(pk.encrypt(np.array(VALUES, dtype=object)), VALUES):
        assert psk.decrypt(phe.EncryptedNumber(ppk, c.ciphertext, exponent=0)) == m


def test_mixed_homomorphic_arithmetic(keys):
    pk, sk, ppk, psk = keys
    a, b = 31415, -27182
    theirs = ppk.encrypt(a)
    ours = pk.encrypt(b)
    mixed = EncryptedNumber(pk, theirs.ciphertext()) + ours
    assert sk.decrypt(mixed) == a + b
    back = phe.EncryptedNumber(ppk, ours.ciphertext, exponent=0) * 3 + theirs
    assert psk.decrypt(back) == 3 * b + a
    assert sk.decrypt(EncryptedNumber(pk, back.ciphertext()) * -2) == -2 * (3 * b + a)
