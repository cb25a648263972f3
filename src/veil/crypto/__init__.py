"""Cryptography for privacy-preserving computation.

* :mod:`~veil.crypto.paillier` — Paillier encryption (additively homomorphic), noise pools,
  the DJN short-exponent option and :class:`~veil.crypto.paillier.EncryptedArray`;
* :mod:`~veil.crypto.threshold` — threshold Paillier (Damgard-Jurik / Shoup) with proofs of
  correct partial decryption;
* :mod:`~veil.crypto.encoding` — fixed-point encoding and BatchCrypt-style packing with
  overflow detection;
* :mod:`~veil.crypto.multiplicative` — textbook RSA, ElGamal and exponential ElGamal;
* :mod:`~veil.crypto.serialization` — versioned, checked bytes for keys and ciphertexts.
"""

from __future__ import annotations

from veil.crypto import encoding, multiplicative, paillier, serialization, threshold

__all__ = ["paillier", "threshold", "encoding", "multiplicative", "serialization"]
