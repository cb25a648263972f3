"""Key agreement and mask expansion of secure aggregation (Bonawitz et al., CCS 2017).

* :func:`agree` -- HKDF-SHA256 of an X25519 shared secret, bound to a context string
  (:mod:`veil.crypto.agreement`; :func:`mask_info` for the pairwise mask seed ``s_ij``,
  :func:`channel_info` for the key that encrypts the shares sent from i to j);
  :func:`agree_many` with many peers;
* :func:`prg` -- n uniform elements of Z_2^k expanded from a 32-byte seed with AES-256-CTR
  or ChaCha20 (:data:`~veil.fl.secagg.ring.PRGS`; a stream cipher's keystream,
  indistinguishable from uniform under the cipher's PRF assumption).
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from veil.crypto.agreement import KEY, agree, agree_many, public_key
from veil.fl.secagg.ring import reduce_ring, ring_dtype

__all__ = ["KEY", "agree", "agree_many", "channel_info", "mask_info", "prg", "public_key"]


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
