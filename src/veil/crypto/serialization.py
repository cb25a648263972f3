"""Keys and ciphertexts to and from bytes: versioned, length-checked, checksummed, no pickle.

Layout of every blob::

    b"VEIL" | version (1 byte) | type tag (1) | body length (4, big-endian) | body | check (16)

where the body is a sequence of fields, each a 4-byte big-endian length and that many
bytes, and ``check`` is the first 16 bytes of SHA-256 over everything before it. Integers
are unsigned big-endian; arrays of residues are one field of fixed-width entries (the
byte length of n^2) plus a shape field of 8-byte dimensions.

Loading checks, in order: magic, version, tag, lengths (the body and every field must
be exactly as long as declared, nothing may trail), the checksum, the number of fields
for the type, and then every value the way the constructors check it (ciphertexts in
Z_{n^2}^*, keys well formed, primes prime). Any failure raises
:class:`~veil.errors.CryptoError`. The checksum catches accidental corruption; it is not
authentication (an attacker can recompute it): authenticate blobs in transit separately.

Public and private parts are separate blobs. Private keys, key shares, ciphertexts and
partial decryptions carry the 16-byte fingerprint of their public key and load only with
``public_key=`` that matches it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
from gmpy2 import mpz

from veil.crypto import multiplicative as mult
from veil.crypto import paillier, threshold
from veil.errors import CryptoError

__all__ = ["dumps", "loads", "VERSION"]

MAGIC = b"VEIL"
VERSION = 1
_HEADER = 10
_CHECK = 16
_TAGS = {
    paillier.PublicKey: 1,
    paillier.PrivateKey: 2,
    paillier.EncryptedNumber: 3,
    paillier.EncryptedArray: 4,
    threshold.ThresholdPublicKey: 5,
    threshold.KeyShare: 6,
    threshold.PartialDecryption: 7,
    mult.RSAPublicKey: 8,
    mult.RSAPrivateKey: 9,
    mult.RSACiphertext: 10,
    mult.ElGamalPublicKey: 11,
    mult.ElGamalPrivateKey: 12,
    mult.ElGamalCiphertext: 13,
    mult.ExpElGamalCiphertext: 14,
}


# ----------------------------------------------------------------------------- fields

def _int(x: Any) -> bytes:
    x = int(x)
    return x.to_bytes((x.bit_length() + 7) // 8, "big")


def _to_int(b: bytes) -> mpz:
    return mpz(int.from_bytes(b, "big"))


def _width(pk: paillier.PublicKey) -> int:
    return (int(pk.n2.bit_length()) + 7) // 8


def _residues(raw: np.ndarray, width: int) -> list[bytes]:
    shape = b"".join(int(d).to_bytes(8, "big") for d in raw.shape)
    return [shape, b"".join(int(x).to_bytes(width, "big") for x in raw.ravel().tolist())]


def _read_residues(shape_b: bytes, blob: bytes, width: int, check: Callable[[mpz, str], mpz],
                   what: str) -> np.ndarray:
    if len(shape_b) % 8:
        raise CryptoError(f"{what}: malformed shape field")
    shape = tuple(int.from_bytes(shape_b[i:i + 8], "big") for i in range(0, len(shape_b), 8))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(blob) != count * width:
        raise CryptoError(f"{what}: {len(blob)} bytes of values for shape {shape}; "
                          f"expected {count * width}")
    out = np.empty(count, dtype=object)
    out[:] = [check(mpz(int.from_bytes(blob[k:k + width], "big")), f"{what}[{k // width}]")
              for k in range(0, len(blob), width)]
    return out.reshape(shape)


# ----------------------------------------------------------------------------- framing

def _frame(tag: int, fields: list[bytes]) -> bytes:
    body = b"".join(len(f).to_bytes(4, "big") + f for f in fields)
    head = MAGIC + bytes([VERSION, tag]) + len(body).to_bytes(4, "big")
    return head + body + hashlib.sha256(head + body).digest()[:_CHECK]


def _unframe(data: Any) -> tuple[int, list[bytes]]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CryptoError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < _HEADER + _CHECK or data[:4] != MAGIC:
        raise CryptoError("not a veil crypto blob (bad magic or too short)")
    if data[4] != VERSION:
        raise CryptoError(f"unsupported blob version {data[4]}; this veil reads version "
                          f"{VERSION}")
    body_len = int.from_bytes(data[6:10], "big")
    if len(data) != _HEADER + body_len + _CHECK:
        raise CryptoError(f"blob length {len(data)} does not match its declared body length "
                          f"{body_len} (truncated or extended)")
    body = data[_HEADER:_HEADER + body_len]
    if hashlib.sha256(data[:_HEADER + body_len]).digest()[:_CHECK] != data[-_CHECK:]:
        raise CryptoError("blob checksum mismatch: the bytes are corrupted")
    fields, pos = [], 0
    while pos < body_len:
        if pos + 4 > body_len:
            raise CryptoError("malformed blob: truncated field length")
        size = int.from_bytes(body[pos:pos + 4], "big")
        pos += 4
        if pos + size > body_len:
            raise CryptoError("malformed blob: a field runs past the end of the body")
        fields.append(body[pos:pos + size])
        pos += size
    return data[5], fields


# ----------------------------------------------------------------------------- encoders

def _noise(pk: paillier.PublicKey) -> bytes:
    return _int(pk.noise_base) if pk.noise_base is not None else b""


def _encode(obj: Any) -> list[bytes]:
    if isinstance(obj, threshold.ThresholdPublicKey):
        extra = [] if obj.share_bits is None else [_int(obj.share_bits)]
        return [_int(obj.n), _noise(obj), _int(obj.parties), _int(obj.threshold), _int(obj.v),
                *(_int(vk) for vk in obj.verification_keys), *extra]
    if isinstance(obj, paillier.PublicKey):
        return [_int(obj.n), _noise(obj), bytes([obj.short_exponents])]
    if isinstance(obj, paillier.PrivateKey):
        return [obj.public_key.fingerprint, _int(obj.p), _int(obj.q)]
    if isinstance(obj, paillier.EncryptedNumber):
        return [obj.public_key.fingerprint, _int(obj.ciphertext)]
    if isinstance(obj, paillier.EncryptedArray):
        return [obj.public_key.fingerprint, *_residues(obj.ciphertexts, _width(obj.public_key))]
    if isinstance(obj, threshold.KeyShare):
        return [obj.public_key.fingerprint, _int(obj.index), _int(obj._share)]
    if isinstance(obj, threshold.PartialDecryption):
        e, z = obj.proof
        return [obj.public_key.fingerprint, _int(obj.party), obj.ciphertext_digest,
                *_residues(obj.values, _width(obj.public_key)), _int(e), _int(z)]
    if isinstance(obj, mult.RSAPublicKey):
        return [_int(obj.n), _int(obj.e)]
    if isinstance(obj, mult.RSAPrivateKey):
        return [obj.public_key.fingerprint, _int(obj.p), _int(obj.q)]
    if isinstance(obj, mult.RSACiphertext):
        return [obj.public_key.fingerprint, _int(obj.value)]
    if isinstance(obj, mult.ElGamalPublicKey):
        return [_int(obj.group.p), _int(obj.group.g), _int(obj.h)]
    if isinstance(obj, mult.ElGamalPrivateKey):
        return [obj.public_key.fingerprint, _int(obj.x)]
    return [obj.public_key.fingerprint, _int(obj.c1), _int(obj.c2)]    # ElGamal pairs


def dumps(obj: Any) -> bytes:
    """Serialize a key, key share, ciphertext or partial decryption of :mod:`veil.crypto`."""
    tag = _TAGS.get(type(obj))
    if tag is None:
        raise CryptoError(f"cannot serialize {type(obj).__name__}: supported are "
                          + ", ".join(sorted(t.__name__ for t in _TAGS)))
    return _frame(tag, _encode(obj))


# ----------------------------------------------------------------------------- decoders

def _need_key(fields: list[bytes], public_key: Any, kind: type, what: str) -> Any:
    if public_key is None:
        raise CryptoError(f"loading a {what} needs public_key= (the key it was made under)")
    if not isinstance(public_key, kind):
        raise CryptoError(f"public_key must be a {kind.__name__} to load a {what}")
    if fields[0] != public_key.fingerprint:
        raise CryptoError(f"the {what} was made under a different key (fingerprint "
                          f"{fields[0].hex()} != {public_key.fingerprint.hex()})")
    return public_key


def _decode(tag: int, f: list[bytes], public_key: Any) -> Any:
    if tag == 1:
        if f[2] not in (b"\x00", b"\x01"):
            raise CryptoError("malformed Paillier public key: bad exponent flag")
        return paillier.PublicKey(_to_int(f[0]), noise_base=_to_int(f[1]) if f[1] else None,
                                  short_exponents=f[2] == b"\x01")
    if tag == 2:
        pk = _need_key(f, public_key, paillier.PublicKey, "Paillier private key")
        return paillier.PrivateKey(_to_int(f[1]), _to_int(f[2]), pk)
    if tag == 3:
        pk = _need_key(f, public_key, paillier.PublicKey, "ciphertext")
        return paillier.EncryptedNumber(pk, _to_int(f[1]))
    if tag == 4:
        pk = _need_key(f, public_key, paillier.PublicKey, "ciphertext array")
        raw = _read_residues(f[1], f[2], _width(pk), pk._check_ciphertext, "ciphertexts")
        return paillier.EncryptedArray._trusted(pk, raw)
    if tag == 5:
        n, parties, t, v = (_to_int(x) for x in (f[0], *f[2:5]))
        vks, extra = f[5:5 + int(parties)], f[5 + int(parties):]      # extra: share_bits
        return threshold.ThresholdPublicKey(n, parties=int(parties), threshold=int(t), v=v,
                                            verification_keys=[_to_int(x) for x in vks],
                                            noise_base=_to_int(f[1]) if f[1] else None,
                                            share_bits=int(_to_int(extra[0])) if extra else None)
    if tag == 6:
        pk = _need_key(f, public_key, threshold.ThresholdPublicKey, "key share")
        share = threshold.KeyShare(pk, int(_to_int(f[1])), _to_int(f[2]))
        share.check()
        return share
    if tag == 7:
        pk = _need_key(f, public_key, threshold.ThresholdPublicKey, "partial decryption")
        values = _read_residues(f[3], f[4], _width(pk), pk._check_ciphertext, "values")
        if len(f[2]) != 32:
            raise CryptoError("partial decryption: malformed ciphertext digest")
        return threshold.PartialDecryption(pk, int(_to_int(f[1])), values, f[2],
                                           (int(_to_int(f[5])), int(_to_int(f[6]))))
    if tag == 8:
        return mult.RSAPublicKey(_to_int(f[0]), _to_int(f[1]))
    if tag == 9:
        pk = _need_key(f, public_key, mult.RSAPublicKey, "RSA private key")
        return mult.RSAPrivateKey(_to_int(f[1]), _to_int(f[2]), pk)
    if tag == 10:
        pk = _need_key(f, public_key, mult.RSAPublicKey, "RSA ciphertext")
        return mult.RSACiphertext(pk, _to_int(f[1]))
    if tag == 11:
        group = mult.ElGamalGroup(_to_int(f[0]), _to_int(f[1]))
        return mult.ElGamalPublicKey(group, _to_int(f[2]))
    if tag == 12:
        pk = _need_key(f, public_key, mult.ElGamalPublicKey, "ElGamal private key")
        return mult.ElGamalPrivateKey(pk, _to_int(f[1]))
    pk = _need_key(f, public_key, mult.ElGamalPublicKey, "ElGamal ciphertext")
    kind = mult.ElGamalCiphertext if tag == 13 else mult.ExpElGamalCiphertext
    return kind(pk, _to_int(f[1]), _to_int(f[2]))


_FIELDS = {1: 3, 2: 3, 3: 2, 4: 3, 6: 3, 7: 7, 8: 2, 9: 3, 10: 2, 11: 3, 12: 2, 13: 3, 14: 3}


def loads(data: bytes, *, public_key: Any = None) -> Any:
    """Rebuild an object from :func:`dumps` bytes; anything malformed raises CryptoError.

    ``public_key``: required for everything but public keys, and must match the blob's
    key fingerprint.
    """
    tag, fields = _unframe(data)
    expected = _FIELDS.get(tag)
    if tag == 5:
        ok = len(fields) >= 6 and len(fields) - 5 - int(_to_int(fields[2])) in (0, 1)
    elif expected is None:
        raise CryptoError(f"unknown blob type tag {tag}")
    else:
        ok = len(fields) == expected
    if not ok:
        raise CryptoError(f"malformed blob: wrong number of fields ({len(fields)}) for type "
                          f"tag {tag}")
    try:
        return _decode(tag, fields, public_key)
    except CryptoError:
        raise
    except (ValueError, TypeError) as exc:   # e.g. a ConfigError from a constructor
        raise CryptoError(f"malformed blob (type tag {tag}): {exc}") from None
