"""Keys and ciphertexts to and from bytes: versioned, length-checked, checksummed, no pickle.

Every blob is a checksummed frame of :mod:`veil._codec` (magic ``b"VCRY"``, version 2)::

    b"VCRY" | version | type tag (u8) | fields | check (16 bytes)

where each field is a codec ``blob`` (u32 little-endian length, then the bytes) and
``check`` the first 16 bytes of SHA-256 over everything before it. Integers are unsigned
big-endian, at most 2048 bytes; arrays of residues are a shape field (ndim u8, then u64
dimensions, at most 2^28 entries) and one field of fixed-width entries (the byte length of
n^2).

Loading checks, in order: magic, version, checksum, lengths (every field must be as long as
declared, nothing may trail), the tag and the number of fields for it, every integer's
size, and then every value the way the constructors check it (ciphertexts in Z_{n^2}^*,
keys well formed, primes prime). Any failure raises :class:`~veil.errors.CryptoError`. The
checksum catches accidental corruption; it is not authentication (an attacker can
recompute it): authenticate blobs in transit separately. Version 1 blobs (magic
``b"VEIL"``, big-endian lengths) fail the magic check: re-export them with this veil.

Public and private parts are separate blobs. Private keys, key shares, ciphertexts and
partial decryptions carry the 16-byte fingerprint of their public key and load only with
``public_key=`` that matches it.

A public key usually comes from a peer, so its sizes are bounded before any work is done
with it: moduli and groups of at least 2048 bits (``insecure_ok=True`` lowers the floor to
128 bits, for tests), at most 16384 bits; a threshold key of at most
:data:`veil.crypto.threshold.MAX_PARTIES` parties (its n! would otherwise grow without
bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from gmpy2 import mpz

from veil._codec import Format
from veil.crypto import multiplicative as mult
from veil.crypto import paillier, threshold
from veil.crypto.paillier.keys import MIN_INSECURE_BITS, MIN_SECURE_BITS
from veil.errors import CryptoError

__all__ = ["FORMAT", "KEY_FILE", "VERSION", "dump_key_share", "dumps", "load_key_share",
           "loads"]

#: the crypto blob format
FORMAT = Format(b"VCRY", 2, error=CryptoError, checksum=True, name="crypto blob")
VERSION = FORMAT.version
#: the largest integer a blob holds, in bytes (16384 bits)
MAX_INT_BYTES = 2048
#: the most entries an array of residues may declare
_MAX_ENTRIES = 1 << 28
_TAGS = {kind: FORMAT.tag(number, kind.__name__) for number, kind in enumerate((
    paillier.PublicKey, paillier.PrivateKey, paillier.EncryptedNumber, paillier.EncryptedArray,
    threshold.ThresholdPublicKey, threshold.KeyShare, threshold.PartialDecryption,
    mult.RSAPublicKey, mult.RSAPrivateKey, mult.RSACiphertext, mult.ElGamalPublicKey,
    mult.ElGamalPrivateKey, mult.ElGamalCiphertext, mult.ExpElGamalCiphertext), start=1)}


# ----------------------------------------------------------------------------- fields

def _int(x: Any) -> bytes:
    x = int(x)
    return x.to_bytes((x.bit_length() + 7) // 8, "big")


def _to_int(b: bytes) -> mpz:
    if len(b) > MAX_INT_BYTES:
        raise CryptoError(f"malformed crypto blob: an integer of {len(b)} bytes; at most "
                          f"{MAX_INT_BYTES}")
    return mpz(int.from_bytes(b, "big"))


def _width(pk: paillier.PublicKey) -> int:
    return (int(pk.n2.bit_length()) + 7) // 8


def _residues(raw: np.ndarray, width: int) -> list[bytes]:
    shape = bytes([raw.ndim]) + b"".join(int(d).to_bytes(8, "little") for d in raw.shape)
    return [shape, b"".join(int(x).to_bytes(width, "big") for x in raw.ravel().tolist())]


def _read_residues(shape_b: bytes, blob: bytes, width: int, check: Callable[[mpz, str], mpz],
                   what: str) -> np.ndarray:
    ndim = shape_b[0] if shape_b else -1
    if not 0 <= ndim <= 32 or len(shape_b) != 1 + 8 * ndim:
        raise CryptoError(f"malformed crypto blob: {what} has a malformed shape field")
    shape = tuple(int.from_bytes(shape_b[i:i + 8], "little") for i in range(1, len(shape_b), 8))
    if any(d > _MAX_ENTRIES for d in shape) or math.prod(shape) > _MAX_ENTRIES:
        raise CryptoError(f"malformed crypto blob: {what} declares more than {_MAX_ENTRIES} "
                          "entries")
    count = math.prod(shape)
    if len(blob) != count * width:
        raise CryptoError(f"malformed crypto blob: {len(blob)} bytes of {what} for "
                          f"{count} entries; expected {count * width}")
    out = np.empty(count, dtype=object)
    out[:] = [check(mpz(int.from_bytes(blob[k:k + width], "big")), f"{what}[{k // width}]")
              for k in range(0, len(blob), width)]
    return out.reshape(shape)


# ----------------------------------------------------------------------------- encoders

def _noise(pk: paillier.PublicKey) -> bytes:
    return _int(pk.noise_base) if pk.noise_base is not None else b""


def _encode(obj: Any) -> list[bytes]:
    if isinstance(obj, threshold.ThresholdPublicKey):
        return [_int(obj.n), _noise(obj), _int(obj.parties), _int(obj.threshold), _int(obj.v),
                *(_int(vk) for vk in obj.verification_keys),
                *(_int(rk) for rk in obj.root_keys or ()), _int(obj.share_bits or 0)]
    if isinstance(obj, paillier.PublicKey):
        return [_int(obj.n), _noise(obj), bytes([obj.short_exponents])]
    if isinstance(obj, paillier.PrivateKey):
        return [obj.public_key.fingerprint, _int(obj.p), _int(obj.q)]
    if isinstance(obj, paillier.EncryptedNumber):
        return [obj.public_key.fingerprint, _int(obj.ciphertext)]
    if isinstance(obj, paillier.EncryptedArray):
        return [obj.public_key.fingerprint, *_residues(obj.ciphertexts, _width(obj.public_key))]
    if isinstance(obj, threshold.KeyShare):
        return [obj.public_key.fingerprint, _int(obj.index), _int(obj._share),
                *(() if obj._root is None else (_int(obj._root),))]
    if isinstance(obj, threshold.PartialDecryption):
        e, z = obj.proof
        return [obj.public_key.fingerprint, _int(obj.party), obj.ciphertext_digest,
                *_residues(obj.values, _width(obj.public_key)), _int(e), _int(z),
                *(() if obj.method == "dj" else (obj.method.encode(),))]
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
    return FORMAT.frame(tag, _encode(obj))


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


def _check_size(bits: int, what: str, insecure_ok: bool) -> None:
    floor = MIN_INSECURE_BITS if insecure_ok else MIN_SECURE_BITS
    if bits < floor:
        hint = "" if insecure_ok else " (smaller test keys only with insecure_ok=True)"
        raise CryptoError(f"the {what} has {bits} bits; at least {floor} are allowed{hint}")


def _decode(tag: int, f: list[bytes], public_key: Any, insecure_ok: bool) -> Any:
    if tag in (1, 5, 8, 11):  # public keys: sizes first (module docstring)
        _check_size(int(_to_int(f[0])).bit_length(), "public key's modulus or group",
                    insecure_ok)
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
        p = int(parties)
        keys = [_to_int(x) for x in f[5:-1]]              # then share_bits (0: dealt key)
        root = keys[p:] if len(keys) == 2 * p else None
        share_bits = int(_to_int(f[-1])) or None
        return threshold.ThresholdPublicKey(n, parties=p, threshold=int(t), v=v,
                                            verification_keys=keys[:p], root_keys=root,
                                            noise_base=_to_int(f[1]) if f[1] else None,
                                            share_bits=share_bits)
    if tag == 6:
        pk = _need_key(f, public_key, threshold.ThresholdPublicKey, "key share")
        share = threshold.KeyShare(pk, int(_to_int(f[1])), _to_int(f[2]),
                                   _to_int(f[3]) if len(f) > 3 else None)
        share.check()
        return share
    if tag == 7:
        pk = _need_key(f, public_key, threshold.ThresholdPublicKey, "partial decryption")
        values = _read_residues(f[3], f[4], _width(pk), pk._check_ciphertext, "values")
        if len(f[2]) != 32:
            raise CryptoError("partial decryption: malformed ciphertext digest")
        method = f[7].decode("ascii", "replace") if len(f) > 7 else "dj"
        return threshold.PartialDecryption(pk, int(_to_int(f[1])), values, f[2],
                                           (int(_to_int(f[5])), int(_to_int(f[6]))),
                                           method=method)
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


# allowed field counts (key shares and partial decryptions of the root method: one more)
_FIELDS = {1: (3,), 2: (3,), 3: (2,), 4: (3,), 6: (3, 4), 7: (7, 8), 8: (2,), 9: (3,),
           10: (2,), 11: (3,), 12: (2,), 13: (3,), 14: (3,)}


def loads(data: bytes, *, public_key: Any = None, insecure_ok: bool = False) -> Any:
    """Rebuild an object from :func:`dumps` bytes; anything malformed raises CryptoError.

    ``public_key``: required for everything but public keys, and must match the blob's
    key fingerprint. ``insecure_ok``: accept public keys under 2048 bits (tests only).
    """
    tag, fields = FORMAT.unframe(data)
    expected = _FIELDS.get(tag)
    if tag == 5:
        ok = len(fields) >= 7 and len(fields[2]) <= 8 and len(fields) - 6 in (
            int(_to_int(fields[2])), 2 * int(_to_int(fields[2])))
        if ok and int(_to_int(fields[2])) > threshold.MAX_PARTIES:
            raise CryptoError(f"malformed threshold key: {int(_to_int(fields[2]))} parties; "
                              f"at most {threshold.MAX_PARTIES} are allowed")
    else:
        ok = len(fields) in expected
    if not ok:
        raise CryptoError(f"malformed blob: wrong number of fields ({len(fields)}) for type "
                          f"tag {tag}")
    try:
        return _decode(tag, fields, public_key, insecure_ok)
    except CryptoError:
        raise
    except (ValueError, TypeError) as exc:   # e.g. a ConfigError from a constructor
        raise CryptoError(f"malformed blob (type tag {tag}): {exc}") from None


# ----------------------------------------------------------------------------- key files

#: a party's key-share file: its threshold public key and its own share, in one checked frame
KEY_FILE = Format(b"VKSF", 1, error=CryptoError, checksum=True, name="key-share file")


def dump_key_share(share: threshold.KeyShare) -> bytes:
    """A party's key-share file: ``dumps(public key)`` and ``dumps(share)`` as two blobs."""
    if not isinstance(share, threshold.KeyShare):
        raise CryptoError(f"dump_key_share takes a threshold.KeyShare, not "
                          f"{type(share).__name__}")
    return KEY_FILE.writer().blob(dumps(share.public_key)).blob(dumps(share)).finish()


def load_key_share(data: bytes, *, insecure_ok: bool = False) -> threshold.KeyShare:
    """The :class:`~veil.crypto.threshold.KeyShare` of a key-share file (its public key
    attached), checked against its verification key; CryptoError for anything else."""
    reader = KEY_FILE.reader(data)
    pk_blob, share_blob = reader.blob(), reader.blob()
    reader.done()
    pk = loads(pk_blob, insecure_ok=insecure_ok)
    if not isinstance(pk, threshold.ThresholdPublicKey):
        raise CryptoError("malformed key-share file: the first blob is not a threshold key")
    share = loads(share_blob, public_key=pk, insecure_ok=insecure_ok)
    if not isinstance(share, threshold.KeyShare):
        raise CryptoError("malformed key-share file: the second blob is not a key share")
    share.check()
    return share
