"""Homomorphic encryption: backends behind one interface and models trained on ciphertexts.

* :mod:`~veil.he.backend` — the interface (:class:`~veil.he.backend.Backend`) and its two
  implementations: Paillier (additive, exact on fixed point, from :mod:`veil.crypto`) and CKKS
  (approximate arithmetic with multiplications and rotations; extra ``fhe``);
* :mod:`~veil.he.ckks` — CKKS over SEAL (TenSEAL's ``sealapi``): parameters checked against the
  HE security standard, depth accounting, serialization;
* :mod:`~veil.he.linear` — :class:`EncryptedLinearRegression` on CKKS: closed form with a
  masked solve, gradient descent fully under encryption, ridge, encrypted prediction;
* :mod:`~veil.he.paillier_regression` — linear regression with Paillier: the server holding X,
  or parties holding row blocks (exact modular masked solve).

CKKS needs TenSEAL (``pip install 'veil[fhe]'``); importing this package does not.
"""

from __future__ import annotations

from veil.he.backend import Backend, CKKSBackend, PaillierBackend

__all__ = ["Backend", "PaillierBackend", "CKKSBackend", "EncryptedLinearRegression",
           "DataOwner", "CKKSContext"]


def __getattr__(name: str):  # lazy: CKKS modules import TenSEAL only when used
    if name in ("EncryptedLinearRegression", "DataOwner"):
        from veil.he import linear
        return getattr(linear, name)
    if name == "CKKSContext":
        from veil.he.ckks import CKKSContext
        return CKKSContext
    raise AttributeError(f"module 'veil.he' has no attribute {name!r}")
