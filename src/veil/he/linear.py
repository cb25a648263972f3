"""Linear regression trained and evaluated on CKKS-encrypted data.

Roles and threat model
----------------------
The **owner** holds the CKKS secret key (:class:`DataOwner`) and the data (X, y); the
**server** (:class:`EncryptedLinearRegression`) holds the public context and computes. Both are
honest-but-curious. The server sees only ciphertexts, the public shape (n, d), and the public
power-of-two scale factors of the data (below). The owner sees what it decrypts: masked
values during the closed-form solve (below), the model when it decrypts ``coef_``, and the
predictions it asks for. A ciphertext under another key, a depth overrun or a value outside the
encodable range raises :class:`~veil.errors.CryptoError`, never a wrong number.

Packing (row-major "cells", one multiplication for all sufficient statistics)
----------------------------------------------------------------------------
Let z_r = (x_r, 1, y_r) (D = d + 2 values; x and y divided by public powers of two so that
|z| <= 1), p the next power of two >= D. A *cell* is p blocks of 2p slots; slot (i, j) of a cell
is block i, position j. The owner encrypts two layouts of each row r, one cell per row::

    U[r](i, j) = z_ri,   V[r](i, j) = z_r,(j mod p)        (0 where the index is >= D)

so U * V holds every product z_ri z_rj, twice per block. Summing the ciphertexts and then the
cells of one ciphertext (log2(cells) rotations: an all-reduce) gives G = Z^T Z in *every* cell:
G(i, j) = G_{i, j mod p}. G holds X^T X, X^T 1, n, X^T y and y^T y: one ciphertext-ciphertext
multiplication per ``slots / 2p^2`` rows, whatever d.

Two vector layouts, both periodic in the cell: layout 1 has w_(j mod p) in slot (i, j);
layout 2 has w_i in slot (i, j) for j < p (the second half of each block is scratch, or
copies).

(a) Closed form with a masked solve (depth 2, 128-bit preset ``depth2``: N = 8192)
-----------------------------------------------------------------------------------
With A = G[:D-1, :D-1] + diag(lambda) (ridge, intercept not penalized) and b = G[:D-1, D-1],
the server draws R = Q (Haar-random orthogonal, (D-1) x (D-1)) and r ~ N(0, I), puts the
columns of R' = [[R, r], [0, 1]] into distinct (cell, half) positions of a plaintext and
multiplies: after a within-block rotate-and-sum, slot (cell, i, half p) holds
(G R')_{ik} = (A R)_ik, and (b + A r)_i for the last column (ridge terms added in plaintext).
The owner decrypts M = A R and v = b + A r, solves u = M^-1 v = R^-1 (w + r) and sends back
E(u) (layout 2); the server computes E(w) = R E(u) - r in layout 1 (all-reduce over blocks),
one level. Who learns what: the server nothing (ciphertexts only); the owner A R and
A (w + r). Since R is orthogonal, (A R)(A R)^T = A^2: **the key holder learns A**. This
masking therefore protects nothing from a key holder who is also the data owner (it knows A
anyway) and is not meant to hide A from a separate key holder: for that use the Paillier
path of :mod:`veil.he.paillier_regression`, whose modular masks hide A perfectly.

(a') The light packing ``packing="rows"`` (closed form only)
-----------------------------------------------------------
The cell packing above uploads 4 p^2 slots per row (two ciphertexts of 2p^2): ~950x the
plaintext for d = 10, ~10x straightforward column packing (one ciphertext per column).
``DataOwner.encrypt_training(X, y, packing="rows")`` encrypts each row once, twice over in
2p slots (slot (r, j) = z_r,(j mod p), j < 2p): slots / 2p rows per ciphertext, so the
upload is 2p / D of column packing's n D slots, rounded up to whole ciphertexts (d = 10:
4 ciphertexts for 442 rows against 12 columns). The server gets the Gram matrix by its
generalized diagonals (Halevi & Shoup, "Algorithms in HElib", CRYPTO 2014): with
x_k = rotate(x, k) (slot (r, j) of x_k holds z_r,(j+k mod p) for j < p),

    diag_k = sum_blocks (x * x_k):   diag_k(j) = sum_r z_rj z_r,(j+k mod p) = G_j,(j+k mod p)

in position j < p of every block of 2p (one ciphertext-ciphertext multiplication per
ciphertext and k, for the k that meet G's D x D corner: k < D or k > p - D; then
log2(slots / 2p) rotations per k for the all-reduce;
positions p .. 2p-1 hold sums of neighbouring rows' products and are multiplied by 0
below). The masked system then costs one plaintext level, as in (a): the columns of R' are
plaintext, and ``(G R')_ic = sum_k diag_k(i) R'_(i+k mod p), c`` puts column c in block c
with the plaintexts P_k(c, i) = R'_(i+k mod p), c for i < D - 1 (0 elsewhere, so the
owner decrypts exactly M and v). Same depth (2), same owner step, same E(w) = R E(u) - r.
The trade-off (``benchmarks/bench_he.py --packings``, RESULTS.md; diabetes, 442 x 10):
the rows packing uploads 4 ciphertexts (1.3 MB) against the cells' 114 (37.8 MB) and
column packing's 12 (4.0 MB), and the owner encrypts ~30x faster than in cells; the server
pays (D + log2(slots / 2p)) operations per diagonal instead of one multiplication per 8
rows: ~3x the cell packing's CPU, still ~7x less than column packing's D (D + 1) / 2
products with log2(slots) rotations each. Gradient descent needs the cell packing (its
iteration reads G in the cell layout).

(b) Gradient descent fully under CKKS (depth 1 per iteration)
-------------------------------------------------------------
With w~ = (w, w_0, -1), the residual is Z w~ = Xw + w_0 - y, and the gradient of
(1/2n)|Xw + w_0 - y|^2 + (1/2) sum lambda_j w_j^2 is ((G w~)_{<D-1})/n + lambda w. One
preconditioned step with the diagonal step sizes P = diag(eta_0, ..., eta_{D-2}, 0) is the
linear map w~ <- M w~ with::

    M = I - P (G + n diag(lambda, 0, 0)) / n

(the last row of M is e_{D-1}: the -1 stays). The step sizes are the owner's, computed in
the clear from its own data before encrypting (:func:`gd_step`) and sent encrypted, E(P) in
layouts 1 and 2 (:attr:`EncryptedTrainingSet.step`): the server learns nothing it did not
before. With H = Z_1^T Z_1 / n over the features and the intercept (Z_1 = Z without y) and
S = diag(1 / H_jj) (Jacobi scaling: within a factor D - 1 of the best diagonal scaling of
the condition number, van der Sluis 1969), P = S / lambda_max(S^1/2 H S^1/2), the largest
eigenvalue computed exactly (LAPACK's symmetric eigensolver, backward stable; the matrix
is (d + 1) x (d + 1)). Then I - P H is similar to I - S^1/2 H S^1/2 / lambda_max, whose
eigenvalues lie in [0, 1): the iteration converges monotonically for any data, at rate
1 - 1/kappa(S^1/2 H S^1/2) (Saad, *Iterative methods for sparse linear systems*, 2003,
Sec. 5.3 and 10.2), where the former step 1/(d + 1) paid kappa(H) times (d + 1) / lambda_max(H).
On diabetes (n = 442, d = 10: kappa(H) = 3227, kappa(S^1/2 H S^1/2) = 470) the R^2 after 16
steps is 0.514 against the closed form's 0.518 (the step 1/(d + 1) gave -0.05, the plain
step 1/lambda_max(H) 0.46). With ridge, P (H + diag(lambda)) has its eigenvalues below 2,
so the iteration still converges, while alpha < lambda_max(S^1/2 H S^1/2) |X_j|^2 for every
feature column X_j (unscaled): a penalty below the data's own curvature; P being
encrypted, the server cannot check this, and a heavier penalty wants the closed form. A
public ``learning_rate`` eta instead takes P = eta I (no preconditioning), in plaintext.

The server computes M from E(G) once, in two layouts (rows masked for step B, columns for
step A, using G = G^T): E(P) times a plaintext mask (one level, in parallel with G's),
then times G + n diag(lambda) (one level), then alternates: step B (layout 1 -> 2)
multiplies E(M) by E(w~) and sums within blocks (log2 p rotations); step A (layout 2 -> 1)
multiplies and all-reduces across blocks (log2 p rotations + one to fill the second
halves). Each iteration is **one** ciphertext-ciphertext multiplication, so T iterations
need depth T + 2 (G, M, then one per step): preset ``depth18`` (N = 32768, 840 of the 881
bits allowed) runs 16 iterations without any interaction. ``refresh_every=k`` adds the
documented interactive alternative: every k iterations the server sends E(w~ + m) with a
fresh Gaussian mask m of standard deviation ``mask_scale`` to the owner, who decrypts and
re-encrypts it at full depth; the server subtracts m. The owner then sees w~ + m
(statistical hiding only, by the mask's size).

(c) Ridge: ``alpha`` as in scikit-learn's ``Ridge`` (penalty alpha |w|^2 on the unscaled
coefficients, none on the intercept); the scaling by powers of two is undone exactly.

(d) Prediction: :meth:`EncryptedLinearRegression.predict` multiplies E(x) (rows packed in
blocks of p: slot r p + j = x_rj, the intercept's 1 included) by the model in layout 1 (the
encrypted E(w), or a plaintext w of the server's own) and sums within blocks; the owner
decrypts slot r p. Two-party variants: :func:`predict_private_model` (the model owner keeps w
private: the data holder computes on E(w)) and the data-private direction, in which the
model owner's plaintext w meets the data holder's E(x) (``predict`` with a plaintext model).

Error bound: the masked closed form returns scikit-learn's coefficients up to the CKKS error,
about 2^-(scale_bits - log2(n) - 10) relative to the largest statistic, plus
``max_prime_drift`` per level (:mod:`veil.he.ckks`); the tests check 1e-4 relative on
diabetes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from veil._validation import check_array, check_fitted, check_int, check_positive
from veil.errors import ConfigError, CryptoError, DataError
from veil.he.ckks import FORMAT, Ciphertext, CKKSContext
from veil.random import check_rng

__all__ = ["PACKINGS", "DataOwner", "EncryptedTrainingSet", "EncryptedRows", "EncryptedModel",
           "EncryptedPredictions", "EncryptedLinearRegression", "cell_width", "gd_step",
           "rotations_for", "predict_private_model"]

logger = logging.getLogger(__name__)


def cell_width(d: int) -> int:
    """p: the block size (a power of two >= d + 2) used for ``d`` features."""
    return 1 << (check_int(d, "d", low=1) + 1).bit_length()


def rotations_for(d: int) -> list[int]:
    """The rotation steps beyond powers of two that models on ``d`` features need."""
    return [-cell_width(d)]


def gd_step(Z: np.ndarray) -> np.ndarray:
    """The owner's preconditioned step sizes P for gradient descent on its scaled rows ``Z``
    (features, 1, y; module docstring (b)): ``S / lambda_max(S^1/2 H S^1/2)`` with
    H = Z_1^T Z_1 / n over the features and the intercept, S = diag(1 / H_jj) (0 for an
    all-zero column, whose coefficient the gradient never moves), and 0 for y."""
    Z1 = Z[:, :-1]
    H = Z1.T @ Z1 / Z1.shape[0]
    h = np.diag(H)
    s = np.divide(1.0, h, out=np.zeros_like(h), where=h > 0)
    root = np.sqrt(s)
    top = float(np.linalg.eigvalsh(root[:, None] * H * root[None, :])[-1])  # >= 1
    return np.append(s / top, 0.0)


def _pow2_scale(values: np.ndarray) -> float:
    """The smallest power of two >= max |values| (1 for all-zero values)."""
    top = float(np.max(np.abs(values))) if values.size else 0.0
    return 2.0 ** math.ceil(math.log2(top)) if top > 0 else 1.0


_TAG_TRAINING, _TAG_ROWS, _TAG_MODEL, _TAG_PREDICTIONS, _TAG_TRAINING_ROWS = (
    FORMAT.tag(number, what) for number, what in enumerate(
        ("encrypted training set", "encrypted rows", "encrypted model", "encrypted predictions",
         "encrypted training set (rows packing)"), start=3))
#: the packings of a training set (module docstring (a) and (a'))
PACKINGS = ("cells", "rows")


def _pack(tag: int, numbers: list[float], cts: tuple[Ciphertext, ...]) -> bytes:
    """Public metadata (float64 numbers) and ciphertexts in veil's framing."""
    meta = np.asarray(numbers, dtype=">f8").tobytes()
    return FORMAT.frame(tag, [meta, *(c.to_bytes() for c in cts)])


def _unpack(tag: int, data: bytes, context: CKKSContext,
            what: str) -> tuple[np.ndarray, tuple[Ciphertext, ...]]:
    """Check the tag and the metadata, load each ciphertext into ``context`` (its key only)."""
    got, fields = FORMAT.unframe(data)
    if got != tag or not fields or len(fields[0]) % 8 or len(fields) < 2:
        raise CryptoError(f"not a veil {what} file")
    numbers = np.frombuffer(fields[0], dtype=">f8").astype(np.float64)
    if not np.all(np.isfinite(numbers)) or numbers.size < 2 or numbers[0] < 1 or \
            numbers[1] < 1 or numbers[0] != int(numbers[0]) or numbers[1] != int(numbers[1]):
        raise CryptoError(f"malformed {what} file: bad metadata")
    return numbers, tuple(context.ciphertext_from_bytes(f) for f in fields[1:])


def _scales(numbers: np.ndarray, start: int, d: int, what: str) -> np.ndarray:
    scale = numbers[start:start + d]
    if scale.size != d or np.any(scale <= 0):
        raise CryptoError(f"malformed {what} file: feature scales")
    return scale


@dataclass(frozen=True)
class EncryptedTrainingSet:
    """The owner's encrypted (X, y) with its public metadata. ``packing="cells"``: ``u``
    and ``v`` in the U/V cell layout and ``step``, E(P), the owner's gradient-descent step
    sizes (:func:`gd_step`) in layouts 1 and 2; ``packing="rows"``: ``u`` holds the rows
    (module docstring (a')), ``v`` and ``step`` are empty."""

    u: tuple[Ciphertext, ...]
    v: tuple[Ciphertext, ...]
    n: int
    d: int
    x_scale: np.ndarray      # public powers of two, one per feature
    y_scale: float
    step: tuple[Ciphertext, ...]
    packing: str = "cells"

    @property
    def context(self) -> CKKSContext:
        return self.u[0].context

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.u + self.v + self.step)

    def to_bytes(self) -> bytes:
        tag = _TAG_TRAINING if self.packing == "cells" else _TAG_TRAINING_ROWS
        return _pack(tag, [self.n, self.d, self.y_scale, *self.x_scale],
                     self.u + self.v + self.step)

    @classmethod
    def from_bytes(cls, data: bytes, context: CKKSContext) -> EncryptedTrainingSet:
        got, _ = FORMAT.unframe(data)
        packing = "rows" if got == _TAG_TRAINING_ROWS else "cells"
        nums, cts = _unpack(_TAG_TRAINING if packing == "cells" else _TAG_TRAINING_ROWS,
                            data, context, "encrypted training set")
        n, d = int(nums[0]), int(nums[1])
        p = cell_width(d)
        if packing == "rows":
            need = -(-n // max(1, context.slots // (2 * p)))
        else:
            pairs = -(-n // max(1, context.slots // (2 * p * p)))
            need = 2 * pairs + 2
        if len(cts) != need or nums.size != 3 + d or nums[2] <= 0:
            raise CryptoError(f"malformed encrypted training set: {len(cts)} ciphertexts for "
                              f"n={n}, d={d}")
        scales, y_scale = _scales(nums, 3, d, "training"), float(nums[2])
        if packing == "rows":
            return cls(cts, (), n, d, scales, y_scale, (), "rows")
        return cls(cts[:pairs], cts[pairs:2 * pairs], n, d, scales, y_scale,
                   (cts[-2], cts[-1]))


@dataclass(frozen=True)
class EncryptedRows:
    """Encrypted feature rows for prediction: slot r p + j = x_rj / x_scale_j, slot r p + d = 1."""

    cts: tuple[Ciphertext, ...]
    n: int
    d: int
    x_scale: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.cts)

    def to_bytes(self) -> bytes:
        return _pack(_TAG_ROWS, [self.n, self.d, *self.x_scale], self.cts)

    @classmethod
    def from_bytes(cls, data: bytes, context: CKKSContext) -> EncryptedRows:
        nums, cts = _unpack(_TAG_ROWS, data, context, "encrypted rows")
        n, d = int(nums[0]), int(nums[1])
        if len(cts) != -(-n // (context.slots // cell_width(d))) or nums.size != 2 + d:
            raise CryptoError(f"malformed encrypted rows: {len(cts)} ciphertexts for n={n}")
        return cls(cts, n, d, _scales(nums, 2, d, "rows"))


@dataclass(frozen=True)
class EncryptedModel:
    """E(w~) in layout 1 with the public scales: what ``veil he train`` writes."""

    ct: Ciphertext
    d: int
    x_scale: np.ndarray
    y_scale: float

    def to_bytes(self) -> bytes:
        return _pack(_TAG_MODEL, [1, self.d, self.y_scale, *self.x_scale], (self.ct,))

    @classmethod
    def from_bytes(cls, data: bytes, context: CKKSContext) -> EncryptedModel:
        nums, cts = _unpack(_TAG_MODEL, data, context, "encrypted model")
        d = int(nums[1])
        if len(cts) != 1 or nums.size != 3 + d or nums[2] <= 0:
            raise CryptoError("malformed encrypted model")
        return cls(cts[0], d, _scales(nums, 3, d, "model"), float(nums[2]))


@dataclass(frozen=True)
class EncryptedPredictions:
    """E(X w~) from :meth:`EncryptedLinearRegression.predict` (prediction r in slot r p)."""

    cts: tuple[Ciphertext, ...]
    n: int
    d: int
    y_scale: float

    def to_bytes(self) -> bytes:
        return _pack(_TAG_PREDICTIONS, [self.n, self.d, self.y_scale], self.cts)

    @classmethod
    def from_bytes(cls, data: bytes, context: CKKSContext) -> EncryptedPredictions:
        nums, cts = _unpack(_TAG_PREDICTIONS, data, context, "encrypted predictions")
        n, d = int(nums[0]), int(nums[1])
        if len(cts) != -(-n // (context.slots // cell_width(d))) or nums.size != 3 \
                or nums[2] <= 0:
            raise CryptoError(f"malformed encrypted predictions: {len(cts)} ciphertexts")
        return cls(cts, n, d, float(nums[2]))


class DataOwner:
    """The secret-key holder: encrypts data, answers the server's interactive steps, decrypts."""

    def __init__(self, context: CKKSContext) -> None:
        if not isinstance(context, CKKSContext) or not context.has_secret_key:
            raise ConfigError("context is not allowed: the owner needs a CKKSContext with its "
                              "secret key")
        self.context = context

    def _cells(self, d: int) -> tuple[int, int]:
        p = cell_width(d)
        cell = 2 * p * p
        if cell > self.context.slots:   # also for rows: E(u) of the masked solve is in cells
            raise ConfigError(f"d={d} is not allowed with {self.context.slots} slots: a row "
                              f"needs a cell of 2 p^2 = {cell} slots (use a larger "
                              "poly_modulus_degree)")
        return p, cell

    def encrypt_training(self, X: Any, y: Any, *, packing: str = "cells"
                         ) -> EncryptedTrainingSet:
        """Encrypt (X, y); scales are powers of two. ``packing="cells"``: the U/V layout
        (module docstring (a)), for both solvers; the gradient-descent step sizes
        (:func:`gd_step`) are computed here, in the clear from the owner's own data, and
        travel encrypted. ``packing="rows"``: each row once (module docstring (a')), ~28x
        lighter for d = 10, closed form only."""
        if packing not in PACKINGS:
            raise ConfigError(f"packing={packing!r} is not allowed: choose 'cells' or 'rows'")
        X = check_array(X, "X", ndim=2)
        y = check_array(y, "y", ndim=1)
        if X.shape[0] != y.shape[0]:
            raise DataError(f"X has {X.shape[0]} rows and y has {y.shape[0]}; they must match")
        n, d = X.shape
        p, cell = self._cells(d)
        x_scale = np.array([_pow2_scale(X[:, j]) for j in range(d)])
        y_scale = _pow2_scale(y)
        Z = np.zeros((n, p))
        Z[:, :d] = X / x_scale
        Z[:, d] = 1.0
        Z[:, d + 1] = y / y_scale
        if packing == "rows":
            per_ct = self.context.slots // (2 * p)
            cts = tuple(self.context.encrypt(np.tile(Z[s:s + per_ct], 2).ravel())
                        for s in range(0, n, per_ct))
            logger.info("encrypted %d x %d in %d ciphertexts (rows packing)", n, d, len(cts))
            return EncryptedTrainingSet(cts, (), n, d, x_scale, y_scale, (), "rows")
        per_ct = self.context.slots // cell
        u, v = [], []
        for start in range(0, n, per_ct):
            rows = Z[start:start + per_ct]
            # U: block i of each cell constant z_ri; V: each block holds z_r twice.
            U = np.repeat(rows[:, :, None], 2 * p, axis=2)
            V = np.repeat(np.tile(rows, 2)[:, None, :], p, axis=1)
            u.append(self.context.encrypt(U.ravel()))
            v.append(self.context.encrypt(V.ravel()))
        step = gd_step(Z[:, :d + 2])
        steps = tuple(self.context.encrypt(_layout(step, k, p, self.context.slots))
                      for k in (1, 2))
        logger.info("encrypted %d x %d in %d ciphertext pairs", n, d, len(u))
        return EncryptedTrainingSet(tuple(u), tuple(v), n, d, x_scale, y_scale, steps)

    def encrypt_rows(self, X: Any, x_scale: Any) -> EncryptedRows:
        """Encrypt rows for prediction with the model's public feature scales."""
        scale = check_array(x_scale, "x_scale", ndim=1)
        X = check_array(X, "X", ndim=2)
        n, d = X.shape
        if d != scale.size:
            raise DataError(f"X has {d} features; the model expects {scale.size}")
        p = cell_width(d)
        Z = np.zeros((n, p))
        Z[:, :d] = X / scale
        Z[:, d] = 1.0
        per_ct = self.context.slots // p
        cts = tuple(self.context.encrypt(Z[s:s + per_ct].ravel()) for s in range(0, n, per_ct))
        return EncryptedRows(cts, n, d, scale)

    def decrypt_predictions(self, predictions: EncryptedPredictions) -> np.ndarray:
        """The n predictions of :meth:`EncryptedLinearRegression.predict`, in y's units."""
        if not isinstance(predictions, EncryptedPredictions):
            raise DataError("decrypt_predictions takes EncryptedPredictions")
        p = cell_width(predictions.d)
        out = np.concatenate([self.context.decrypt(c)[::p] for c in predictions.cts])
        return out[:predictions.n] * predictions.y_scale

    # -- interactive steps -------------------------------------------------------
    def solve_masked(self, columns: list[Ciphertext], where: list[np.ndarray],
                     d1: int, p: int) -> Ciphertext:
        """Closed form, owner's step: decrypt M = A R and v = b + A r, return E(M^-1 v).

        ``where[g][i, k]``: the slot where ciphertext g holds row i of its k-th column
        (the columns of [M | v] in order across the ciphertexts).
        """
        Mv = np.column_stack([self.context.decrypt(ct)[at] for ct, at in zip(columns, where)])
        M, v = Mv[:, :d1], Mv[:, d1]
        try:
            u = np.linalg.solve(M, v)
        except np.linalg.LinAlgError:
            raise DataError("X^T X + alpha I is singular: add alpha > 0 or drop collinear "
                            "features") from None
        return self.context.encrypt(_layout(u, 2, p, self.context.slots))

    def refresh(self, ct: Ciphertext, layout: int, size: int) -> Ciphertext:
        """GD refresh: decrypt the (masked) vector of ``size`` entries and re-encrypt it at
        full depth in the same layout."""
        w = self._read(ct, layout, size)
        return self.context.encrypt(_layout(w, layout, cell_width(size - 2), self.context.slots))

    def _read(self, ct: Ciphertext, layout: int, size: int) -> np.ndarray:
        """The vector from a periodic layout: the median over its copies (the CKKS error is
        heavy-tailed across slots: a few slots carry 10-100x the typical error)."""
        p = cell_width(size - 2)
        plain = self.context.decrypt(ct)
        if layout == 1:
            return np.median(plain.reshape(-1, p)[:, :size], axis=0)
        return np.median(plain.reshape(-1, p, 2 * p)[:, :size, :p], axis=(0, 2))

    def decrypt_model(self, model: Ciphertext, d: int) -> np.ndarray:
        """w~ in layout 1 -> the first d + 1 entries (scaled coefficients and intercept)."""
        return self._read(model, 1, d + 2)[:d + 1]


def _diagonals(d: int) -> list[int]:
    """The generalized diagonals k of the Gram matrix the rows packing needs: those that
    meet its (d + 2) x (d + 2) corner (module docstring (a'))."""
    p, D = cell_width(d), d + 2
    return [k for k in range(p) if k < D or k > p - D]


def _layout(w: np.ndarray, layout: int, p: int, slots: int) -> np.ndarray:
    """A vector in layout 1 (w_(j mod p) in slot (i, j)) or 2 (w_i in all of block i)."""
    if layout == 1:
        return np.tile(np.pad(w, (0, p - w.size)), slots // p)
    block = np.zeros((p, 2 * p))
    block[:w.size, :] = w[:, None]
    return np.tile(block.ravel(), slots // block.size)


def _haar_orthogonal(k: int, rng: Any) -> np.ndarray:
    """A Haar-random orthogonal matrix: QR of a Gaussian matrix with the signs of diag(R)."""
    q, r = np.linalg.qr(rng.standard_normal((k, k)))
    return q * np.sign(np.diag(r))


class EncryptedLinearRegression:
    """Linear / ridge regression on CKKS-encrypted data, scikit-learn shaped.

    Parameters: ``alpha`` (ridge penalty, as :class:`sklearn.linear_model.Ridge`; 0 for
    ordinary least squares), ``solver`` ("closed_form": masked solve, needs ``owner``; "gd":
    gradient descent under encryption), ``max_iter`` and ``learning_rate`` (GD; None: the
    owner's encrypted preconditioned step sizes, which converge for any data, module
    docstring (b); a number: that public step on the data scaled to |z| <= 1, the same for
    every coefficient; it converges below 2 / lambda_max(Z^T Z / n), and 1 / (d + 1) always
    does since that eigenvalue is at most the trace <= d + 1), ``refresh_every`` (GD: an
    owner refresh every k iterations; 0 for none), ``mask_scale`` (standard deviation of the
    refresh mask), ``owner`` (the :class:`DataOwner`, reached for the interactive steps and
    for decrypting ``coef_``), ``rng`` (masks; secure by default). See the module
    docstring for the protocol, the depth plan and who learns what.
    """

    def __init__(self, alpha: float = 0.0, *, solver: str = "closed_form", max_iter: int = 10,
                 learning_rate: float | None = None, refresh_every: int = 0,
                 mask_scale: float = 1e3, owner: DataOwner | None = None, rng: Any = None) -> None:
        self.alpha = alpha
        self.solver = solver
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.refresh_every = refresh_every
        self.mask_scale = mask_scale
        self.owner = owner
        self.rng = rng

    # -- helpers -----------------------------------------------------------------
    def _check_params(self, data: Any) -> None:
        if not isinstance(data, EncryptedTrainingSet):
            raise DataError("fit takes the EncryptedTrainingSet of DataOwner.encrypt_training")
        check_positive(self.alpha, "alpha", allow_zero=True)
        if self.solver not in ("closed_form", "gd"):
            raise ConfigError(f"solver={self.solver!r} is not allowed: choose 'closed_form' "
                              "or 'gd'")
        if self.solver == "gd" and data.packing != "cells":
            raise ConfigError(f"solver='gd' is not allowed with packing={data.packing!r}: "
                              "gradient descent needs the cell packing "
                              "(encrypt_training(..., packing='cells'))")
        if self.solver == "closed_form" and self.owner is None:
            raise ConfigError("solver='closed_form' needs owner= (the key holder solves the "
                              "masked system)")
        check_int(self.max_iter, "max_iter", low=1)
        if self.learning_rate is not None:
            check_positive(self.learning_rate, "learning_rate")
        check_int(self.refresh_every, "refresh_every", low=0)
        if self.refresh_every and self.owner is None:
            raise ConfigError("refresh_every > 0 needs owner= (the key holder refreshes)")
        if self.owner is not None and self.owner.context.fingerprint != data.context.fingerprint:
            raise CryptoError("the owner's key is not the key of the training data")
        ctx = data.context
        if data.n > ctx.max_abs / 4:
            raise ConfigError(f"n={data.n} rows are too many for this context: the statistics "
                              f"reach n and must stay below max_abs/4 = {ctx.max_abs / 4:g} "
                              "(use a first modulus with more bits)")
        steps = min(self.refresh_every or self.max_iter, self.max_iter)
        need = 2 + (steps if self.solver == "gd" else 0)
        if ctx.depth < need:
            raise ConfigError(f"the context has depth {ctx.depth}; solver={self.solver!r} with "
                              f"max_iter={self.max_iter}, refresh_every={self.refresh_every} "
                              f"needs {need} (G, then M or the mask, then one per iteration)")

    def _penalty(self, data: EncryptedTrainingSet) -> np.ndarray:
        """Ridge diagonal in the scaled coordinates: alpha / x_scale_j^2, 0 for the intercept.

        |y - Xw - w_0|^2 + alpha |w|^2 = s_y^2 (|y' - X'w' - w_0'|^2 + sum_j alpha w_j'^2 /
        s_j^2) for y = s_y y', X_j = s_j X_j', w_j = w_j' s_y / s_j: the same minimizer.
        """
        lam = np.zeros(data.d + 1)
        lam[:data.d] = self.alpha / data.x_scale ** 2
        return lam

    @staticmethod
    def _gram(data: EncryptedTrainingSet) -> Ciphertext | list[Ciphertext]:
        """E(G) in every cell (cell packing), or its p diagonals (rows packing: module
        docstring (a'))."""
        ctx = data.context
        p = cell_width(data.d)
        if data.packing == "rows":
            diags: dict[int, Any] = {}
            for x in data.u:
                xk, at = x, 0
                for k in _diagonals(data.d):
                    while at < k:   # rotation keys: powers of two (rotate by 1 then, or more)
                        step = 1 << ((k - at).bit_length() - 1)
                        xk, at = ctx.rotate(xk, step), at + step
                    prod = x * xk
                    diags[k] = prod if k not in diags else diags[k] + prod
            return [ctx.sum_blocks(dk, 2 * p, ctx.slots // (2 * p)) for dk in diags.values()]
        acc = None
        for u, v in zip(data.u, data.v):
            prod = u * v
            acc = prod if acc is None else acc + prod
        return ctx.sum_blocks(acc, 2 * p * p, ctx.slots // (2 * p * p))

    # -- training ----------------------------------------------------------------
    def fit(self, data: EncryptedTrainingSet, y: None = None) -> EncryptedLinearRegression:
        """Train on the owner's encrypted (X, y); the model is ``self.model_`` (E(w~))."""
        self._check_params(data)
        rng = check_rng(self.rng)
        G = self._gram(data)
        self.n_features_in_ = data.d
        self.x_scale_, self.y_scale_ = data.x_scale, data.y_scale
        if self.solver == "closed_form":
            self.model_ = self._masked_solve(G, data, rng)
        else:
            self.model_ = self._gradient_descent(G, data, rng)
        self.__dict__.pop("_coef", None)
        return self

    def _masked_solve(self, G: Ciphertext | list[Ciphertext], data: EncryptedTrainingSet,
                      rng: Any) -> Ciphertext:
        ctx = data.context
        d1, D, p = data.d + 1, data.d + 2, cell_width(data.d)
        cell = 2 * p * p
        cells = ctx.slots // cell
        R = _haar_orthogonal(d1, rng)
        r = rng.standard_normal(d1)
        Rp = np.zeros((p, p))
        Rp[:d1, :d1], Rp[:d1, d1], Rp[d1, d1] = R, r, 1.0
        lam = self._penalty(data)
        extra = lam[:, None] * np.column_stack([R, r])        # diag(lambda) R'
        columns, where = [], []
        if data.packing == "rows":   # column c in block c (module docstring (a'))
            blocks = ctx.slots // (2 * p)
            rows = np.arange(d1)
            acc = None
            for k, diag in zip(_diagonals(data.d), G):
                plain = np.zeros((blocks, 2 * p))
                plain[:D, :d1] = Rp[(rows + k) % p, :D].T
                prod = diag * plain.ravel()
                acc = prod if acc is None else acc + prod
            add = np.zeros((blocks, 2 * p))
            add[:D, :d1] = extra.T
            columns.append(acc + add.ravel())
            where.append(rows[:, None] + 2 * p * np.arange(D)[None, :])
        for first in range(0, D if data.packing == "cells" else 0, 2 * cells):
            mask = np.zeros((cells, p, 2, p))
            add = np.zeros((cells, p, 2, p))
            pos = []
            for k in range(first, min(D, first + 2 * cells)):
                c, h = divmod(k - first, 2)
                mask[c, :d1, h, :D] = Rp[:D, k]
                add[c, :d1, h, 0] = extra[:, k]
                pos.append(c * cell + h * p)
            prod = ctx.sum_blocks(G * mask.ravel(), 1, p)
            columns.append(prod + add.ravel())
            where.append(2 * p * np.arange(d1)[:, None] + np.asarray(pos)[None, :])
        u = self.owner.solve_masked(columns, where, d1, p)
        # E(w) = R E(u) - r: slot (i, j) of the plaintext holds R[j mod p, i]
        block = np.zeros((p, 2, p))
        block[:d1, 0, :d1] = R.T
        block[:d1, 1, :d1] = R.T
        w = ctx.sum_blocks(u * np.tile(block.ravel(), cells), 2 * p, p)
        return w - _layout(r, 1, p, ctx.slots)

    def _gradient_descent(self, G: Ciphertext, data: EncryptedTrainingSet,
                          rng: Any) -> Ciphertext:
        ctx = G.context
        D, p = data.d + 2, cell_width(data.d)
        cells = ctx.slots // (2 * p * p)
        n = data.n
        # P in layouts 1 and 2: the owner's E(P), or a public eta (module docstring (b))
        step1, step2 = data.step if self.learning_rate is None else \
            (float(self.learning_rate),) * 2
        # M = I - P (G + n diag(lam)) / n; B-layout rows i, A-layout transposed
        ridge = np.zeros((p, 2, p))
        diag_b = np.zeros((p, 2, p))
        diag_a = np.zeros((p, 2, p))
        for i, penalty in enumerate(self._penalty(data)):
            ridge[i, :, i] = penalty
        for i in range(D):
            diag_b[i, :, i] = 1.0
            diag_a[i, 0, i] = 1.0
        rows = np.zeros((p, 2, p))
        rows[:D - 1, :, :D] = -1.0 / n
        cols = np.zeros((p, 2, p))
        cols[:D, 0, :D - 1] = -1.0 / n
        G = G + np.tile(ridge.ravel(), cells)
        m_b = G * (step2 * np.tile(rows.ravel(), cells)) + np.tile(diag_b.ravel(), cells)
        m_a = G * (step1 * np.tile(cols.ravel(), cells)) + np.tile(diag_a.ravel(), cells)
        w0 = np.zeros(D)
        w0[D - 1] = -1.0
        # start in layout 2 when the step count is odd, so that the last step lands in layout 1
        layout = 1 if self.max_iter % 2 == 0 else 2
        w: Any = _layout(w0, layout, p, ctx.slots)
        for it in range(self.max_iter):
            if layout == 1:            # step B: (M w)_i into slot (i, j < p)
                w = ctx.sum_blocks(m_b * w, 1, p)
                layout = 2
            else:                      # step A: (M w)_j into every slot (., j)
                half = ctx.sum_blocks(m_a * w, 2 * p, p)
                w = half + ctx.rotate(half, -p)
                layout = 1
            if self.refresh_every and (it + 1) % self.refresh_every == 0 \
                    and it + 1 < self.max_iter:
                plain = _layout(rng.normal(0.0, self.mask_scale, D), layout, p, ctx.slots)
                w = self.owner.refresh(w + plain, layout, D) - plain
            logger.debug("GD iteration %d: level %d", it + 1, w.level)
        return w

    # -- model -------------------------------------------------------------------
    @property
    def coef_(self) -> np.ndarray:
        return self._revealed()[0]

    @property
    def intercept_(self) -> float:
        return self._revealed()[1]

    def _revealed(self) -> tuple[np.ndarray, float]:
        check_fitted(self, "model_")
        if "_coef" not in self.__dict__:
            if self.owner is None:
                raise ConfigError("coef_ needs owner= (only the key holder can decrypt the "
                                  "model)")
            w = self.owner.decrypt_model(self.model_, self.n_features_in_)
            self._coef = (w[:-1] * self.y_scale_ / self.x_scale_, float(w[-1] * self.y_scale_))
        return self._coef

    @property
    def encrypted_model_(self) -> EncryptedModel:
        """The trained E(w~) with its public scales (to save, or to send)."""
        check_fitted(self, "model_")
        return EncryptedModel(self.model_, self.n_features_in_, self.x_scale_, self.y_scale_)

    @classmethod
    def from_encrypted_model(cls, model: EncryptedModel, **params: Any
                             ) -> EncryptedLinearRegression:
        """A fitted estimator around a stored :class:`EncryptedModel`."""
        est = cls(**params)
        est.model_, est.n_features_in_ = model.ct, model.d
        est.x_scale_, est.y_scale_ = model.x_scale, model.y_scale
        return est

    def predict(self, rows: EncryptedRows, *, model: Any = None) -> EncryptedPredictions:
        """E(X w + w_0) for encrypted rows (one ciphertext per chunk of rows; depth 1).

        ``model``: a plaintext (coef, intercept) of the server's own instead of the
        encrypted model (the data-private direction: the server learns nothing of x).
        """
        if not isinstance(rows, EncryptedRows):
            raise DataError("predict takes the EncryptedRows of DataOwner.encrypt_rows")
        ctx = rows.cts[0].context
        p = cell_width(rows.d)
        if model is None:
            check_fitted(self, "model_")
            if rows.d != self.n_features_in_:
                raise DataError(f"rows have {rows.d} features; the model expects "
                                f"{self.n_features_in_}")
            w: Any = self.model_
        else:
            coef, intercept = model
            coef = check_array(coef, "coef", ndim=1)
            if coef.size != rows.d:
                raise DataError(f"coef has {coef.size} values; rows have {rows.d} features")
            w = _layout(np.append(coef * rows.x_scale, intercept), 1, p, ctx.slots)
        y_scale = self.y_scale_ if model is None else 1.0
        return EncryptedPredictions(tuple(ctx.sum_blocks(ct * w, 1, p) for ct in rows.cts),
                                    rows.n, rows.d, y_scale)


def predict_private_model(model: Ciphertext, X: Any, x_scale: Any, *,
                          mask_scale: float = 1e3, rng: Any = None
                          ) -> tuple[EncryptedPredictions, np.ndarray]:
    """The model owner keeps w private: the data holder's side of the prediction.

    The model owner sends E(w~) (layout 1, under its own key) and its public feature scales;
    the data holder computes E(x_r . w~ + m_r) with its plaintext rows and a Gaussian mask m
    (standard deviation ``mask_scale``) that it keeps, and sends the ciphertexts back. The model
    owner decrypts masked predictions only (statistical hiding by the mask's size) and returns
    them; the data holder subtracts m. Returns (ciphertexts, m). Depth 1.
    """
    scale = check_array(x_scale, "x_scale", ndim=1)
    X = check_array(X, "X", ndim=2)
    if not isinstance(model, Ciphertext):
        raise CryptoError("model must be the model owner's CKKS ciphertext E(w)")
    n, d = X.shape
    if d != scale.size:
        raise DataError(f"X has {d} features; the model expects {scale.size}")
    ctx = model.context
    p = cell_width(d)
    per_ct = ctx.slots // p
    Z = np.zeros((n, p))
    Z[:, :d] = X / scale
    Z[:, d] = 1.0
    mask = check_rng(rng).normal(0.0, check_positive(mask_scale, "mask_scale"), n)
    out = []
    for s in range(0, n, per_ct):
        rows = Z[s:s + per_ct]
        shift = np.zeros((rows.shape[0], p))
        shift[:, 0] = mask[s:s + per_ct]
        out.append(ctx.sum_blocks(model * rows.ravel(), 1, p) + shift.ravel())
    return EncryptedPredictions(tuple(out), n, d, 1.0), mask
