"""Cryptography for privacy-preserving computation.

* :mod:`~veil.crypto.paillier` — Paillier encryption (additively homomorphic), noise pools,
  the DJN short-exponent option and :class:`~veil.crypto.paillier.EncryptedArray`;
* :mod:`~veil.crypto.threshold` — threshold Paillier (Damgard-Jurik / Shoup) with proofs of
  correct partial decryption;
* :mod:`~veil.crypto.encoding` — fixed-point encoding and BatchCrypt-style packing with
  overflow detection;
* :mod:`~veil.crypto.multiplicative` — textbook RSA, ElGamal and exponential ElGamal;
* :mod:`~veil.crypto.serialization` — versioned, checked bytes for keys and ciphertexts;
* :mod:`~veil.crypto.sharing` — additive (Z_2^64) and Shamir (GF(2^61 - 1)) secret sharing;
* :mod:`~veil.crypto.psi` — ECDH private set intersection on Curve25519;
* :mod:`~veil.crypto.identity` — Ed25519 identity keys, signatures and identity tables;
* :mod:`~veil.crypto.agreement` — X25519 key agreement with HKDF-SHA256;
* :mod:`~veil.crypto.millionaires` — Yao's 1982 millionaires' protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.crypto import (
        encoding,
        identity,
        millionaires,
        multiplicative,
        paillier,
        psi,
        serialization,
        sharing,
        threshold,
    )

__all__ = ["paillier", "threshold", "encoding", "multiplicative", "serialization",
           "sharing", "psi", "millionaires", "identity"]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
