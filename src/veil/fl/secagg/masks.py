"""Key agreement and mask expansion of secure aggregation (Bonawitz et al., CCS 2017).

* :func:`agree` -- HKDF-SHA256 of an X25519 shared secret, bound to a context string
  (:func:`mask_info` for the pairwise mask seed ``s_ij``, :func:`channel_info` for the key
  that encrypts the shares sent from i to j); :func:`agree_many` with many peers;
* :func:`prg` -- n uniform elements of Z_2^k expanded from a 32-byte seed with AES-256-CTR
  or ChaCha20 (:data:`~veil.fl.secagg.ring.PRGS`; a stream cipher's keystream,
  indistinguishable from uniform under the cipher's PRF assumption).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from veil.errors import ProtocolError
from veil.fl.secagg.ring import reduce_ring, ring_dtype

__all__ = ["KEY", "agree", "agree_many", "channel_info", "mask_info", "prg", "public_key"]

#: bytes of every secret, seed and derived key
KEY = 32


def public_key(secret: bytes) -> bytes:
    """The X25519 public key of a 32-byte secret."""
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()


def agree(secret: bytes, peer_public: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 of the X25519 shared secret, bound to ``info``."""
    return agree_many(secret, [(peer_public, info)])[0]


def agree_many(secret: bytes, peers: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
    """:func:`agree` of one secret with each ``(peer_public, info)`` (the private key is
    loaded once: the server recovering a dropped client's pairwise seeds with all its
    partners)."""
    own = X25519PrivateKey.from_private_bytes(secret)
    out = []
    for peer_public, info in peers:
        try:
            shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError as exc:  # a low-order public key gives the all-zero secret
            raise ProtocolError(f"key agreement failed: {exc}") from None
        out.append(HKDF(hashes.SHA256(), KEY, salt=None, info=info).derive(shared))
    return out


def mask_info(server_round: int, i: int, j: int) -> bytes:
    """The HKDF context of the pairwise mask of i and j (symmetric in i, j)."""
    lo, hi = min(i, j), max(i, j)
    return b"veil secagg mask|%d|%d|%d" % (server_round, lo, hi)


def channel_info(server_round: int, sender: int, recipient: int) -> bytes:
    """The HKDF context of the key that encrypts the shares ``sender`` sends ``recipient``."""
    return b"veil secagg share|%d|%d->%d" % (server_round, sender, recipient)


def prg(seed: bytes, n: int, bits: int, algorithm: str) -> np.ndarray:
    """n uniform elements of Z_2^bits expanded from a 32-byte seed (as the ring dtype)."""
    dtype = ring_dtype(bits)
    if algorithm == "aes-ctr":
        cipher = Cipher(algorithms.AES(seed), modes.CTR(bytes(16)))
    else:
        cipher = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None)
    stream = cipher.encryptor().update(bytes(n * dtype.itemsize))
    return reduce_ring(np.frombuffer(stream, dtype=dtype.newbyteorder("<")).astype(dtype), bits)
