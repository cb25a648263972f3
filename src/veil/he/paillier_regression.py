"""Linear / ridge regression with Paillier: exact rational answers, two settings.

Both settings compute, on Paillier ciphertexts of fixed-point integers
(:class:`veil.crypto.encoding.FixedPoint`, f fractional bits), the ridge normal equations

    A w = b,   A = Z^T Z + diag(alpha 2^(2f), ..., alpha 2^(2f), 0),   b = Z^T y,

with Z = [X, 1] and every entry an integer at 2f fractional bits, and return the solution as
an encrypted integer vector N and an integer D with w = N / D exactly (Cramer's rule:
D = det A, N = adj(A) b). The only approximation is the rounding of the inputs to 2^-f,
so coefficients equal scikit-learn's on the rounded data to float64 precision.

Setting 1: the server holds X (say, features), the owner holds y and the key
-------------------------------------------------------------------------
The owner sends E(y). The server, knowing A in the clear, computes D = det A and
E(N) = adj(A) (Z^T E(y)) with plaintext integer matrices (:func:`fit_server_features`).
The owner decrypts N and receives D: it learns w (and det A); the server learns nothing of y.

Setting 2: parties hold row blocks, one key holder, an aggregating server
-----------------------------------------------------------------------
Each party i encrypts its own E(A_i), E(b_i) under the key holder's public key
(:func:`party_statistics`); the server adds them (:func:`aggregate`). The solve is masked
modulo n so that **the key holder learns nothing about A and b** (Nikolaenko et al.,
"Privacy-preserving ridge regression on hundreds of millions of records", S&P 2013, mask a
linear system the same way; the modular variant here is exact):

1. server: R uniform in GL_k(Z_n), r uniform in Z_n^k; sends E(A R), E(b + A r)
   (:meth:`MaskedSolve.request`);
2. key holder: decrypts M = A R and v = b + A r, which are uniform and independent of A, b
   (R, r uniform); computes delta = det M and u = M^-1 v mod n; returns E(delta u), E(delta)
   (:func:`answer_masked`);
3. server: E(N) = det(R)^-1 (R E(delta u) - E(delta) r) and E(D) = det(R)^-1 E(delta) mod n,
   since delta u = det(A) det(R) R^-1 (w + r) (:meth:`MaskedSolve.finish`).

The key holder finally decrypts N and D, i.e. learns w = N / D and det A. Before step 1 the
server checks the Hadamard bound |det A|, |N_i| <= (sqrt(k) max|entry|)^k against n / 2 from
the public data bounds: a key too small for the exact answer is a ConfigError, never a
wrapped result. A non-invertible M (probability about k / p for the primes p of n) raises
CryptoError: rerun with fresh masks. Threat model: honest-but-curious server and key holder,
not colluding; parties trust only themselves (they only encrypt).

Cost: step 1 is k^3 exponentiations with |n|-bit exponents (k = d + 1), the price of perfect
hiding; CKKS (:mod:`veil.he.linear`) is faster and approximate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import gmpy2
import numpy as np

from veil._validation import check_array, check_positive
from veil.crypto import paillier
from veil.crypto.encoding import FixedPoint
from veil.errors import ConfigError, CryptoError, DataError
from veil.random import check_rng

__all__ = ["EncryptedSolution", "fit_server_features", "party_statistics", "aggregate",
           "MaskedSolve", "answer_masked", "decrypt_solution", "hadamard_bits"]


@dataclass(frozen=True)
class EncryptedSolution:
    """w = N / D: E(N) (k values: coefficients then intercept) and D (plain int or E(D))."""

    numerators: paillier.EncryptedArray
    denominator: Any


def _design(X: np.ndarray, coder: FixedPoint) -> np.ndarray:
    """[X, 1] as fixed-point integers (object array)."""
    Z = np.column_stack([X, np.ones(X.shape[0])])
    return coder.encode(Z).astype(object)


def _ridge(k: int, alpha: float, coder: FixedPoint) -> np.ndarray:
    lam = np.zeros((k, k), dtype=object)
    scaled = int(round(check_positive(alpha, "alpha", allow_zero=True) * 4 ** coder.frac_bits))
    for i in range(k - 1):
        lam[i, i] = scaled
    return lam


def hadamard_bits(k: int, max_entry: int) -> int:
    """Bits of (sqrt(k) max_entry)^k, Hadamard's bound on a k x k determinant."""
    return math.ceil(k * (0.5 * math.log2(k) + math.log2(max(max_entry, 1)))) + 1


def _check_key(pk: paillier.PublicKey, k: int, max_entry: int) -> None:
    need = hadamard_bits(k, max_entry)
    if need >= pk.bits - 1:
        raise ConfigError(f"bits={pk.bits} is too small for an exact solve: det(A) and "
                          f"adj(A) b may need {need} bits (k={k}); use a larger key, fewer "
                          "features or fewer fractional bits")


def _det_adj(A: np.ndarray) -> tuple[int, np.ndarray]:
    """det(A) and adj(A) = det(A) A^-1 of an integer matrix, exactly (rational elimination)."""
    k = A.shape[0]
    M = [[Fraction(int(A[i, j])) for j in range(k)] + [Fraction(int(i == j)) for j in range(k)]
         for i in range(k)]
    det = Fraction(1)
    for c in range(k):
        piv = next((r for r in range(c, k) if M[r][c] != 0), None)
        if piv is None:
            raise DataError("X^T X + alpha I is singular: add alpha > 0 or drop collinear "
                            "features")
        if piv != c:
            M[c], M[piv] = M[piv], M[c]
            det = -det
        det *= M[c][c]
        inv = 1 / M[c][c]
        M[c] = [x * inv for x in M[c]]
        for r in range(k):
            if r != c and M[r][c] != 0:
                f = M[r][c]
                M[r] = [x - f * y for x, y in zip(M[r], M[c])]
    adj = np.empty((k, k), dtype=object)
    for i in range(k):
        for j in range(k):
            v = M[i][k + j] * det
            adj[i, j] = v.numerator          # an integer: adj(A) has integer entries
    return int(det), adj


def fit_server_features(X: Any, encrypted_y: paillier.EncryptedArray, *, alpha: float = 0.0,
                        encoding: FixedPoint | None = None) -> EncryptedSolution:
    """Setting 1: the server's plaintext X and the owner's E(y) (encoded with ``encoding``)."""
    coder = encoding or FixedPoint()
    X = check_array(X, "X", ndim=2)
    if not isinstance(encrypted_y, paillier.EncryptedArray) or encrypted_y.shape != (len(X),):
        raise DataError(f"encrypted_y must be an EncryptedArray of {len(X)} values")
    Z = _design(X, coder)
    A = Z.T.dot(Z) + _ridge(Z.shape[1], alpha, coder)
    _check_key(encrypted_y.public_key, Z.shape[1],
               max(int(np.abs(A).max()), coder.max_int * int(np.abs(Z).max()) * len(X)))
    det, adj = _det_adj(A)
    return EncryptedSolution(encrypted_y.__rmatmul__(Z.T).__rmatmul__(adj), det)


def party_statistics(X: Any, y: Any, public_key: paillier.PublicKey, *,
                     encoding: FixedPoint | None = None,
                     rng: Any = None) -> tuple[paillier.EncryptedArray, paillier.EncryptedArray]:
    """Setting 2, a party: E(Z_i^T Z_i), E(Z_i^T y_i) of its own rows (integers, 2f bits)."""
    coder = encoding or FixedPoint()
    X = check_array(X, "X", ndim=2)
    y = check_array(y, "y", ndim=1)
    if len(X) != len(y):
        raise DataError(f"X has {len(X)} rows and y has {len(y)}; they must match")
    Z = _design(X, coder)
    yi = coder.encode(y).astype(object)
    return (public_key.encrypt(Z.T.dot(Z), rng=rng), public_key.encrypt(Z.T.dot(yi), rng=rng))


def aggregate(stats: list[tuple[paillier.EncryptedArray, paillier.EncryptedArray]], *,
              alpha: float = 0.0, encoding: FixedPoint | None = None
              ) -> tuple[paillier.EncryptedArray, paillier.EncryptedArray]:
    """The server: E(A) = sum E(A_i) + ridge, E(b) = sum E(b_i); shapes checked per party."""
    coder = encoding or FixedPoint()
    if not stats:
        raise DataError("aggregate needs the statistics of at least one party")
    k = stats[0][1].shape[0] if isinstance(stats[0][1], paillier.EncryptedArray) else 0
    A = b = None
    for i, pair in enumerate(stats):
        ok = (isinstance(pair, tuple) and len(pair) == 2
              and all(isinstance(c, paillier.EncryptedArray) for c in pair)
              and pair[0].shape == (k, k) and pair[1].shape == (k,))
        if not ok:
            raise DataError(f"stats[{i}] is not a pair (E(A_i) {k}x{k}, E(b_i) {k}) of the "
                            "other parties' shape")
        A = pair[0] if A is None else A + pair[0]
        b = pair[1] if b is None else b + pair[1]
    return A + _ridge(k, alpha, coder), b


def _mod_inverse_matrix(M: list[list[int]], n: int) -> tuple[int, list[list[int]]]:
    """det(M) and M^-1 modulo n by Gauss-Jordan elimination (CryptoError if a pivot is not
    invertible mod n)."""
    k = len(M)
    aug = [[x % n for x in row] + [int(i == j) for j in range(k)] for i, row in enumerate(M)]
    det = 1
    for c in range(k):
        piv = next((r for r in range(c, k) if math.gcd(aug[r][c], n) == 1), None)
        if piv is None:
            raise CryptoError("the masked matrix is not invertible modulo n: rerun the "
                              "masked solve with fresh masks")
        if piv != c:
            aug[c], aug[piv] = aug[piv], aug[c]
            det = -det
        det = det * aug[c][c] % n
        inv = int(gmpy2.invert(aug[c][c], n))
        aug[c] = [x * inv % n for x in aug[c]]
        for r in range(k):
            if r != c and aug[r][c]:
                f = aug[r][c]
                aug[r] = [(x - f * y) % n for x, y in zip(aug[r], aug[c])]
    return det % n, [row[k:] for row in aug]


class MaskedSolve:
    """The server's side of the exact masked solve (setting 2, steps 1 and 3)."""

    def __init__(self, A: paillier.EncryptedArray, b: paillier.EncryptedArray, *,
                 entry_bound: int, rng: Any = None) -> None:
        pk = A.public_key
        k = b.shape[0]
        _check_key(pk, k, entry_bound)
        rng = check_rng(rng)
        n = int(pk.n)
        while True:
            R = [[rng.randbelow(n) for _ in range(k)] for _ in range(k)]
            try:
                self._det_r, _ = _mod_inverse_matrix(R, n)
                break
            except CryptoError:
                continue
        self._R = np.array(R, dtype=object)
        self._r = np.array([rng.randbelow(n) for _ in range(k)], dtype=object)
        self.A, self.b, self.public_key = A, b, pk

    def request(self) -> tuple[paillier.EncryptedArray, paillier.EncryptedArray]:
        """E(A R) and E(b + A r) for the key holder."""
        return self.A.dot(self._R), self.b + self.A.dot(self._r)

    def finish(self, delta_u: paillier.EncryptedArray,
               delta: paillier.EncryptedNumber) -> EncryptedSolution:
        """E(N), E(D) from the key holder's E(delta u), E(delta)."""
        pk = self.public_key
        k = self._r.shape[0]
        if not (isinstance(delta_u, paillier.EncryptedArray) and delta_u.shape == (k,)
                and isinstance(delta, paillier.EncryptedNumber)):
            raise CryptoError(f"the key holder's answer must be E(delta u) ({k} values) and "
                              "E(delta)")
        inv = int(gmpy2.invert(self._det_r, pk.n))
        n_enc = (delta_u.__rmatmul__(self._R) - delta * self._r) * inv
        return EncryptedSolution(n_enc, delta * inv)


def answer_masked(masked: tuple[paillier.EncryptedArray, paillier.EncryptedArray],
                  private_key: paillier.PrivateKey, *, rng: Any = None
                  ) -> tuple[paillier.EncryptedArray, paillier.EncryptedNumber]:
    """The key holder (step 2): from uniform M, v mod n, E(delta u) and E(delta)."""
    pk = private_key.public_key
    n = int(pk.n)
    M_enc, v_enc = masked
    k = v_enc.shape[0] if isinstance(v_enc, paillier.EncryptedArray) else -1
    if not (isinstance(M_enc, paillier.EncryptedArray) and M_enc.shape == (k, k)):
        raise CryptoError("the masked system must be E(M) (k x k) and E(v) (k)")
    M = [[int(x) % n for x in row] for row in private_key.decrypt(M_enc)]
    v = [int(x) % n for x in private_key.decrypt(v_enc)]
    delta, inv = _mod_inverse_matrix(M, n)
    u = [sum(a * b for a, b in zip(row, v)) % n for row in inv]
    du = np.array([delta * x % n for x in u], dtype=object)
    du = np.where(du > pk.half, du - n, du)
    signed_delta = delta - n if delta > pk.half else delta
    return pk.encrypt(du, rng=rng), pk.encrypt(signed_delta, rng=rng)


def decrypt_solution(solution: EncryptedSolution,
                     private_key: paillier.PrivateKey) -> tuple[np.ndarray, float]:
    """The key holder: (coef, intercept) = N / D as floats (exact rationals rounded once)."""
    nums = private_key.decrypt(solution.numerators)
    den = solution.denominator
    den = private_key.decrypt(den) if isinstance(den, paillier.EncryptedNumber) else int(den)
    if den == 0:
        raise CryptoError("the denominator det(A) decrypted to 0: the system is singular")
    w = np.array([int(x) / den for x in nums])
    return w[:-1], float(w[-1])
