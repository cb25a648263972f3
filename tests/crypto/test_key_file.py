"""Key-share files (``veil keygen --out``): public key and share in one checked frame."""

from __future__ import annotations

import pytest

from veil.crypto import threshold
from veil.crypto.serialization import dump_key_share, load_key_share
from veil.errors import CryptoError


@pytest.fixture(scope="module")
def shares():
    return threshold.keygen(bits=512, parties=3, threshold=2, insecure_ok=True, rng=3)[1]


def test_round_trip(shares):
    back = [load_key_share(dump_key_share(s), insecure_ok=True) for s in shares]
    pk = back[0].public_key
    assert [s.index for s in back] == [1, 2, 3]
    assert pk.fingerprint == shares[0].public_key.fingerprint
    c = pk.encrypt(77)
    assert pk.combine([back[0].partial_decrypt(c), back[2].partial_decrypt(c)]) == 77


def test_bad_files_are_refused(shares):
    blob = bytearray(dump_key_share(shares[0]))
    with pytest.raises(CryptoError, match="under 2048|insecure"):
        load_key_share(bytes(blob))
    blob[len(blob) // 2] ^= 1
    with pytest.raises(CryptoError):
        load_key_share(bytes(blob), insecure_ok=True)
    with pytest.raises(CryptoError):
        load_key_share(b"VKSF\x01", insecure_ok=True)
    with pytest.raises(CryptoError, match="KeyShare"):
        dump_key_share(shares[0].public_key)
