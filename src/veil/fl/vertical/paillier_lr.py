"""Vertical logistic and linear regression with Paillier encryption (Hardy et al. 2017).

Parties: the *guest* holds the labels y and features X_0 (plus the intercept column), each
*host* k holds features X_k of the same aligned rows; the *arbiter* holds the Paillier key
pair (FATE's "Coordinated-LR"). The model is ``z = sum_k X_k w_k``; each party keeps its
own block w_k and never sees another's.

One mini-batch B (Hardy, Henecka, Ivey-Law, Nock, Patrini, Smith & Thorne, "Private
federated learning on vertically partitioned data via entity resolution and additively
homomorphic encryption", arXiv:1711.10677, section 3; all values in fixed point, see
"Encoding"):

1. guest -> hosts: the epoch, the batch number and the row indices of B;
2. host k -> guest: ``[[u_k]] = [[X_k[B] w_k]]`` under the arbiter's public key;
3. guest: the encrypted residual ``[[r]] = sum_k [[u_k]] + (u_0 - c y)`` (a plaintext
   addition), rerandomized, -> every host. The logistic loss is replaced by its
   second-order Taylor expansion at z = 0 (Hardy et al. eq. 5):
   ``log(1 + e^(-y' z)) ~ log 2 - y' z / 2 + z^2 / 8`` with y' = 2y - 1 in {-1, 1},
   whose gradient is ``(z/4 - y'/2) x``; the guest sends ``r = 4 (z/4 - y'/2) =
   z - 2 y'`` (c y term: ``2 y'``) so that no fraction multiplies a ciphertext. For linear
   regression (squared loss ``(z - y)^2 / 2``) ``r = z - y``;
4. every party p (guest included): ``[[g_p]] = X_p[B]^T [[r]]``, masked with a fresh
   uniform integer vector R_p of ``key bits - 8`` bits (statistical hiding 2^-(key bits -
   8 - bits of g)), -> arbiter;
5. arbiter -> p: the decryption ``g_p + R_p``; p removes R_p and takes the step
   ``w_p <- step(w_p, g_p / (s |B|) + alpha w_p)`` (s = 4 for the logistic Taylor
   residual, 1 for linear; no penalty on the intercept) with its own optimizer.

Threat model: semi-honest parties, no collusion of the arbiter with any other party.
The guest sees only ciphertexts of the hosts' scores; hosts see only ciphertexts of the
residuals; the arbiter sees only masked gradients (uniform up to 2^-(key bits - 8 -
bits of g)). Each party learns its own gradient (Hardy et al. state the same leakage).
A colluding arbiter and guest learn the hosts' scores u_k; a colluding arbiter and host
learn the residuals, hence the labels. Prediction releases each host's scores u_k to the
guest in the clear (as FATE does). Malicious parties are not covered.

Why the arbiter is the default key holder (and not threshold decryption among the
parties): veil's threshold Paillier (:mod:`veil.crypto.threshold`) needs a trusted
dealer at key generation - who then knows the factorization - so it moves the trust in
a third party to set-up time rather than removing it, and each threshold decryption
costs every party an exponentiation with a ~4,000-bit exponent per value plus a proof,
against one CRT decryption at the arbiter; the arbiter is also the shape of FATE's
published benchmark (Coordinated-LR), which this module is compared with. Threshold
decryption is offered (:class:`ShareHolder`, :func:`combine`, composed by
:class:`ThresholdDecryption`): an n-of-n key of :mod:`veil.crypto.threshold` dealt once
among the guest and the hosts; step 5 becomes "every share holder sends the owner of a
masked gradient its partial decryption (with its proof of correctness), the owner
combines them" - no online party can decrypt alone, and the arbiter disappears.

Optional label differential privacy against the hosts (``label_epsilon``): each epoch the
guest adds discrete Gaussian noise (Canonne, Kamath & Steinke 2020) to the residual
integers it sends to the hosts (its own gradient uses the clean residual). Changing one
label changes one residual by ``4 * 2^F`` (logistic: 2 y' moves by 4), and every label is
in one batch per epoch, so each epoch is one discrete Gaussian mechanism of that L2
sensitivity on disjoint coordinates; everything a host sees (its gradients, its model)
is post-processing. The guest's :class:`~veil.dp.Ledger` is charged before each epoch's
noise is drawn (``epsilon / epochs``, ``delta / epochs`` each, composed by the ledger's
accountant, which needs to handle zCDP events: ``accountant="rdp"``).

Third order (``Plan(link="cubic")``, one host only): the residual becomes
``r = 4 (s(z) - y) = c1 z + c3 z^3 - 2 y'`` for the odd cubic ``s(z) = 1/2 + a1 z + a3 z^3``
fitted to the sigmoid by least squares on ``[-R, R]`` (``cubic_range``; a Taylor cubic at 0,
``1/2 + z/4 - z^3/48``, turns down beyond |z| = 2 and diverges on FATE's default credit -
benchmarks/RESULTS.md). The host sends ``[[u]], [[u^2]], [[u^3]]`` (powers of its own
integer scores, so at 1, 2 and 3 times F fractional bits) and the guest, with its own score
g, forms ``[[z^3]] = g^3 + 3 g^2 [[u]] + 3 g [[u^2]] + [[u^3]]`` by plaintext operations; the
coefficients carry ``K = 16`` bits, the residual ``3F + K``. The host encrypts three values
per row instead of one; the hosts' cross terms ``u_1 u_2`` of two or more hosts cannot be
formed this way, so the cubic link takes exactly one host. The cubic's loss is not convex
(s turns down beyond |z| = R'): features must be bounded (each party winsorizes its own)
and the step small; with rmsprop on raw features it diverges.

Encoding: scores and residuals carry ``F = 20`` fractional bits; features are rounded to
``FX = 12`` fractional bits and centered on their column's midpoint m (so that an exponent
is at most half the column's span: ``X^T [[r]] = (X - m)^T [[r]] + m * sum [[r]]``, a
negative exponent taking the inverse of its ciphertext); the product X^T [[r]] is one
multi-exponentiation per column (Pippenger's bucket method) costing about
``ceil(E / c)(|B| + 2^(c+1))`` multiplications mod n^2 for E-bit exponents - for a full
batch of 100k standardized rows (|x - m| < 2^15 / 2^FX) one 15-bit digit, |B| + 2 max|x - m|.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil._validation import check_array, check_choice, check_epsilon, check_int, check_positive
from veil.crypto import paillier, serialization, threshold
from veil.crypto.fastexp import multi_pow
from veil.errors import BudgetExceededError, ConfigError, CryptoError, DataError, ProtocolError
from veil.fl.messages import encode
from veil.fl.vertical._wire import read_message
from veil.fl.vertical.optim import OPTIMIZERS, Optimizer
from veil.random import check_rng

__all__ = ["Plan", "PaillierGuest", "PaillierHost", "Arbiter", "ShareHolder", "combine",
           "ThresholdDecryption", "TASKS", "FixedPointFeatures", "read_ciphertexts",
           "read_public_key"]

log = logging.getLogger(__name__)

TASKS = ("logistic", "linear")
LINKS = ("taylor2", "cubic")
F = 20
FX = 12
_K = 16          # fractional bits of the cubic residual's coefficients
_MASK_MARGIN = 8
_MAX_EXP_BITS = 40


@dataclass(frozen=True)
class Plan:
    """The training schedule a party agreed to (each party holds and checks its own)."""

    task: str = "logistic"
    epochs: int = 10
    batch_size: int = 1024
    learning_rate: float = 0.15
    alpha: float = 0.0
    optimizer: str = "sgd"
    link: str = "taylor2"
    cubic_range: float = 4.0

    def __post_init__(self) -> None:
        check_choice(self.task, "task", TASKS)
        check_choice(self.link, "link", LINKS)
        check_positive(self.cubic_range, "cubic_range")
        if self.link == "cubic" and self.task != "logistic":
            raise ConfigError("link='cubic' is for task='logistic' only")
        check_int(self.epochs, "epochs", low=1)
        check_int(self.batch_size, "batch_size", low=1)
        check_positive(self.learning_rate, "learning_rate")
        check_positive(self.alpha, "alpha", allow_zero=True)
        check_choice(self.optimizer, "optimizer", OPTIMIZERS)

    @property
    def scale(self) -> int:
        """The residual's factor s: r = s * (gradient of the loss in z)."""
        return 4 if self.task == "logistic" else 1

    @property
    def residual_bits(self) -> int:
        """Fractional bits of the residual integers (F; cubic: 3F + K)."""
        return F if self.link == "taylor2" else 3 * F + _K

    @property
    def coefficients(self) -> tuple[float, float]:
        """(c1, c3) of the logistic residual ``r = c1 z + c3 z^3 - 2 y'`` (module docstring,
        "Third order"): (1, 0) for the Taylor expansion, 4 (a1, a3) for the least-squares
        odd cubic ``1/2 + a1 z + a3 z^3`` of the sigmoid on [-cubic_range, cubic_range]."""
        if self.link == "taylor2":
            return 1.0, 0.0
        t = np.linspace(-self.cubic_range, self.cubic_range, 4001)
        a1, a3 = np.linalg.lstsq(np.column_stack([t, t ** 3]), 1 / (1 + np.exp(-t)) - 0.5,
                                 rcond=None)[0]
        return 4 * float(a1), 4 * float(a3)


def _get(msg: dict, name: str, kind: type | tuple, party: str) -> Any:
    value = msg.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ProtocolError(f"message from {party!r}: field {name!r} is "
                            f"{type(value).__name__}; expected {kind}")
    return value


def read_public_key(blob: bytes, party: str, min_bits: int, me: str) -> paillier.PublicKey:
    """A Paillier public key from ``party``, of at least ``min_bits`` bits (``me`` requires)."""
    try:
        pk = serialization.loads(blob, insecure_ok=min_bits < paillier.MIN_SECURE_BITS)
    except CryptoError as exc:
        raise ProtocolError(f"message from {party!r}: bad public key: {exc}") from None
    if not isinstance(pk, paillier.PublicKey):
        raise ProtocolError(f"message from {party!r}: not a Paillier public key")
    if pk.bits < min_bits:
        raise ProtocolError(f"message from {party!r}: a {pk.bits}-bit key; {me!r} requires "
                            f"at least {min_bits} bits")
    return pk


def read_ciphertexts(blob: Any, pk: paillier.PublicKey, shape: int | tuple[int, ...], party: str
                 ) -> paillier.EncryptedArray:
    """Ciphertexts from ``party``: valid under ``pk``, of ``shape`` (an int: that many)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not isinstance(blob, bytes):
        raise ProtocolError(f"message from {party!r}: ciphertexts are not bytes")
    try:
        arr = serialization.loads(blob, public_key=pk)
    except CryptoError as exc:
        raise ProtocolError(f"message from {party!r}: bad ciphertexts: {exc}") from None
    if not isinstance(arr, paillier.EncryptedArray) or arr.shape != shape:
        raise ProtocolError(f"message from {party!r}: expected ciphertexts of shape {shape}, "
                            f"got {getattr(arr, 'shape', type(arr).__name__)}")
    return arr


class FixedPointFeatures:
    """A party's feature block in the fixed point of the protocol (see "Encoding")."""

    def __init__(self, X: np.ndarray, name: str) -> None:
        scaled = np.rint(X * 2.0 ** FX)
        self.offset = np.floor((scaled.min(axis=0) + scaled.max(axis=0)) / 2).astype(np.int64)
        centered = scaled - self.offset
        top = float(np.abs(centered).max()) if centered.size else 0.0
        bits = max(int(top).bit_length(), 1)
        if bits > _MAX_EXP_BITS:
            raise DataError(f"the features of {name!r} span {2 * top / 2 ** FX:.3g}: too wide "
                            f"for the fixed-point encoding (max 2^{_MAX_EXP_BITS + 1 - FX}); "
                            "standardize them first")
        self.nbytes = (bits + 7) // 8
        self.negative = np.ascontiguousarray(centered.T < 0)          # one row per feature
        self.exps = np.ascontiguousarray(np.abs(centered).astype("<u8").T)

    def gradient(self, rows: np.ndarray, r: paillier.EncryptedArray, workers: int = 1
                 ) -> list[mpz]:
        """``[[X[rows]^T r]]`` as raw ciphertexts (X in units of 2^-FX): per column j,
        ``prod_i c_i^(x_ij - m_j) * (prod_i c_i)^(m_j)`` with m_j the column's midpoint, so
        that the exponents are at most half the column's span; a negative exponent takes
        the inverse of its base. ``workers`` > 1: the columns are split among that many
        forked processes (they share these inputs by the fork; nothing random is drawn)."""
        global _FORKED
        n2 = r.public_key.n2
        bases = r.ciphertexts
        total = multi_pow(bases.tolist(), np.ones((bases.size, 1), np.uint8), n2)  # [[sum r]]
        negative = self.negative[:, rows]
        inverses = np.empty_like(bases)
        if negative.any():
            inverses[:] = [gmpy2.invert(c, n2) for c in bases.tolist()]
        args = (rows, bases, inverses, negative, total, n2)
        count = len(self.exps)
        if workers <= 1 or count < 2:
            return [self._column(j, *args) for j in range(count)]
        workers = min(workers, count)
        _FORKED = (self, args)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                parts = pool.map(_forked_columns, [range(k, count, workers)
                                                   for k in range(workers)])
        finally:
            _FORKED = None
        out: list[mpz] = [mpz(0)] * count
        for k, part in enumerate(parts):
            out[k::workers] = part
        return out

    def _column(self, j: int, rows: np.ndarray, bases: np.ndarray, inverses: np.ndarray,
                negative: np.ndarray, total: mpz, n2: mpz) -> mpz:
        digits = self.exps[j][rows].view(np.uint8).reshape(-1, 8)[:, :self.nbytes]
        c = multi_pow(np.where(negative[j], inverses, bases).tolist(), digits, n2)
        m = int(self.offset[j])
        return c * gmpy2.powmod(total, m, n2) % n2 if m else c


#: (features, gradient inputs) for the forked workers of :meth:`FixedPointFeatures.gradient`
_FORKED: tuple | None = None


def _forked_columns(columns: range) -> list[mpz]:
    features, args = _FORKED
    return [features._column(j, *args) for j in columns]


class _Party:
    """What the guest and the hosts share: weights, optimizer, masked gradient round trip."""

    role = "party"

    def __init__(self, name: str, X: Any, plan: Plan | dict, *, insecure_ok: bool = False,
                 workers: int = 1, rng: Any = None, crypto_rng: Any = None) -> None:
        self.name = str(name)
        self.workers = check_int(workers, "workers", low=1)
        self._min_key_bits = 256 if insecure_ok else paillier.MIN_SECURE_BITS
        self.plan = plan if isinstance(plan, Plan) else Plan(**plan)
        self._X = check_array(X, f"X of {self.name!r}", ndim=2)
        self._features = FixedPointFeatures(self._X, self.name)
        self.coef_ = np.zeros(self._X.shape[1])
        self._optimizer = Optimizer(self.plan.optimizer, self.plan.learning_rate,
                                    self._X.shape[1])
        self._rng = check_rng(rng)              # batch order (simulation randomness)
        self._secure = check_rng(crypto_rng)    # masks, encryption, DP noise: the CSPRNG
        self._pk: paillier.PublicKey | None = None
        self._pool: paillier.NoisePool | None = None
        self._mask: list[int] | None = None
        self._rows: np.ndarray | None = None
        self._step = (-1, -1)

    @property
    def n_samples(self) -> int:
        return self._X.shape[0]

    def receive_key(self, message: bytes) -> None:
        """The arbiter's public key."""
        msg = read_message(message, "key", "arbiter")
        self._pk = read_public_key(_get(msg, "key", bytes, "arbiter"), "arbiter",
                               self._min_key_bits, self.name)

    def noise_pool(self, capacity: int) -> paillier.NoisePool:
        """A :class:`~veil.crypto.paillier.NoisePool` of ``capacity`` noise values for the
        arbiter's key, drawn from this party's CSPRNG, which its encryptions (a host's
        scores) and rerandomizations (the guest's residuals) then take from, each value
        once. The caller starts and stops it (``with party.noise_pool(n): ...``) so that
        noise is computed while the party waits for its peers."""
        self._pool = paillier.NoisePool(self._need_key(), capacity=capacity, rng=self._secure)
        return self._pool

    def _need_key(self) -> paillier.PublicKey:
        if self._pk is None:
            raise ProtocolError(f"{self.name!r} has no public key yet: receive_key() first")
        return self._pk

    def _masked_gradient(self, r: paillier.EncryptedArray) -> bytes:
        pk = self._need_key()
        raw = self._features.gradient(self._rows, r, self.workers)
        bits = pk.bits - _MASK_MARGIN
        self._mask = [self._secure.randbits(bits) for _ in raw]
        masked = [c * (m * pk.n + 1) % pk.n2 for c, m in zip(raw, self._mask)]
        blob = serialization.dumps(paillier.EncryptedArray(pk, masked))
        epoch, batch = self._step
        return encode({"stage": "gradient", "party": self.name, "epoch": epoch,
                       "batch": batch, "cts": blob})

    def update(self, message: bytes) -> None:
        """Take the arbiter's decryption of this party's masked gradient and step."""
        msg = read_message(message, "decrypted", "arbiter")
        if self._mask is None:
            raise ProtocolError(f"{self.name!r} expects no decryption now")
        epoch, batch = self._step
        if (msg.get("party"), msg.get("epoch"), msg.get("batch")) != (self.name, epoch, batch):
            raise ProtocolError(f"message from 'arbiter': decryption for "
                                f"{msg.get('party')!r} epoch {msg.get('epoch')!r} batch "
                                f"{msg.get('batch')!r}; {self.name!r} expects epoch {epoch} "
                                f"batch {batch}")
        values = _get(msg, "values", list, "arbiter")
        if len(values) != len(self._mask) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ProtocolError(f"message from 'arbiter': {len(values)} values for "
                                f"{len(self._mask)} gradient entries")
        grad = np.array([float(v - m) for v, m in zip(values, self._mask)])
        grad /= 2.0 ** (self.plan.residual_bits + FX) * self.plan.scale * len(self._rows)
        if not np.all(np.isfinite(grad)):
            raise ProtocolError("message from 'arbiter': the gradient is not finite")
        grad += self.plan.alpha * self.coef_ * self._penalized()
        self.coef_ = self._optimizer.step(self.coef_, grad)
        self._mask = None

    def _penalized(self) -> np.ndarray:
        return np.ones_like(self.coef_)

    def scores(self, X: Any | None = None) -> np.ndarray:
        """This party's partial scores ``X w`` (its training rows when X is None)."""
        X = self._X if X is None else check_array(X, f"X of {self.name!r}", ndim=2)
        if X.shape[1] != self.coef_.size:
            raise DataError(f"X of {self.name!r} has {X.shape[1]} columns; the model has "
                            f"{self.coef_.size}")
        return X @ self.coef_


class PaillierHost(_Party):
    """A feature holder (sans-I/O): batch -> encrypted scores; residual -> masked gradient."""

    role = "host"

    def forward(self, message: bytes) -> bytes:
        """The guest's batch message -> ``[[X_k[B] w_k]]`` for the guest."""
        pk = self._need_key()
        msg = read_message(message, "batch", "guest")
        epoch = _get(msg, "epoch", int, "guest")
        batch = _get(msg, "batch", int, "guest")
        if (epoch, batch) <= self._step or epoch >= self.plan.epochs:
            raise ProtocolError(f"message from 'guest': epoch {epoch} batch {batch} is "
                                f"replayed, out of order or beyond {self.name!r}'s plan of "
                                f"{self.plan.epochs} epochs")
        for agreed in ("task", "link"):   # what this host agreed to, never the guest's word
            if msg.get(agreed) != getattr(self.plan, agreed):
                raise ProtocolError(f"message from 'guest': {agreed} {msg.get(agreed)!r}; "
                                    f"{self.name!r} agreed to {getattr(self.plan, agreed)!r}")
        rows = msg.get("rows")
        n = self.n_samples
        if not (isinstance(rows, np.ndarray) and rows.dtype == np.int64 and rows.ndim == 1
                and 0 < rows.size <= self.plan.batch_size and rows.min() >= 0
                and rows.max() < n and np.unique(rows).size == rows.size):
            raise ProtocolError(f"message from 'guest': the batch rows are not distinct "
                                f"int64 indices in [0, {n}) of at most "
                                f"{self.plan.batch_size}")
        self._step, self._rows = (epoch, batch), rows
        u = np.rint(self._X[rows] @ self.coef_ * 2.0 ** F).astype(np.int64).astype(object)
        powers = [u] if self.plan.link == "taylor2" else [u, u * u, u * u * u]
        blobs = [serialization.dumps(pk.encrypt(p, pool=self._pool, rng=self._secure))
                 for p in powers]
        return encode({"stage": "scores", "party": self.name, "epoch": epoch,
                       "batch": batch, "cts": blobs[0], "powers": blobs[1:]})

    def backward(self, message: bytes) -> bytes:
        """The guest's encrypted residual -> this host's masked gradient for the arbiter."""
        msg = read_message(message, "residual", "guest")
        if (msg.get("epoch"), msg.get("batch")) != self._step or self._rows is None:
            raise ProtocolError(f"message from 'guest': residual for epoch "
                                f"{msg.get('epoch')!r} batch {msg.get('batch')!r}; "
                                f"{self.name!r} is at {self._step}")
        r = read_ciphertexts(msg.get("cts"), self._need_key(), self._rows.size, "guest")
        return self._masked_gradient(r)


class PaillierGuest(_Party):
    """The label holder (sans-I/O): drives the batches, forms the encrypted residuals.

    ``y``: labels (0/1 for logistic, real for linear); the intercept is the guest's (last
    coefficient, ``intercept_``). ``label_epsilon``/``label_delta`` with ``ledger``: label
    DP against the hosts (module docstring). Every party takes ``rng`` for the batch order
    (simulation randomness: a seed makes runs reproducible) and ``crypto_rng`` for masks,
    encryption noise and DP noise (None, the default: the CSPRNG; a seed only in tests).
    """

    role = "guest"

    def __init__(self, X: Any, y: Any, hosts: Sequence[str], plan: Plan | dict, *,
                 fit_intercept: bool = True, label_epsilon: float | None = None,
                 label_delta: float = 1e-5, ledger: Any = None, insecure_ok: bool = False,
                 workers: int = 1, rng: Any = None, crypto_rng: Any = None) -> None:
        X = check_array(X, "X of 'guest'", ndim=2, allow_empty=True)
        if fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        plan = plan if isinstance(plan, Plan) else Plan(**plan)
        y = check_array(y, "y", ndim=1)
        if y.size != X.shape[0]:
            raise DataError(f"y has {y.size} labels for {X.shape[0]} rows of the guest")
        if plan.task == "logistic" and not np.all((y == 0) | (y == 1)):
            raise DataError("y must hold 0/1 labels for task='logistic'")
        self._mechanism = None
        if label_epsilon is not None:
            if plan.task != "logistic":
                raise ConfigError("label_epsilon is for task='logistic' only: linear labels "
                                  "have no bounded sensitivity")
            if ledger is None:
                raise ConfigError("label_epsilon needs ledger= (the guest's Ledger)")
            from dp_accounting import dp_event as de  # on use: a node's process per message

            from veil.dp.gaussian import DiscreteGaussian

            self._mechanism = DiscreteGaussian(
                check_epsilon(label_epsilon, "label_epsilon") / plan.epochs,
                label_delta / plan.epochs, sensitivity=4 * 2 ** F)
            whole = de.SelfComposedDpEvent(self._mechanism.event, plan.epochs)
            if not ledger.fits(whole, delta=label_delta):
                raise BudgetExceededError(f"label_epsilon={label_epsilon} over {plan.epochs} "
                                          "epochs does not fit the guest's ledger; nothing "
                                          "was charged")
        super().__init__("guest", X, plan, insecure_ok=insecure_ok, workers=workers, rng=rng,
                         crypto_rng=crypto_rng)
        self.fit_intercept = bool(fit_intercept)
        self.hosts = [str(h) for h in hosts]
        if not self.hosts or "guest" in self.hosts or len(set(self.hosts)) != len(self.hosts):
            raise ConfigError(f"hosts={list(hosts)!r} is not allowed: distinct names, none "
                              "'guest', at least one")
        if plan.link == "cubic" and (len(self.hosts) != 1 or label_epsilon is not None):
            raise ConfigError("link='cubic' needs exactly one host (the guest forms "
                              "E((u_guest + u_host)^3) from the host's E(u), E(u^2), E(u^3); "
                              "two hosts' cross terms cannot be formed) and no label_epsilon")
        self._y = y
        self._ledger = ledger
        self._order: list[np.ndarray] = []
        self._noise: np.ndarray | None = None
        self._clean: paillier.EncryptedArray | None = None

    def _penalized(self) -> np.ndarray:
        mask = np.ones_like(self.coef_)
        if self.fit_intercept:
            mask[-1] = 0.0
        return mask

    @property
    def intercept_(self) -> float:
        return float(self.coef_[-1]) if self.fit_intercept else 0.0

    def next_batch(self) -> bytes | None:
        """The next batch message for every host, or None when the plan is done."""
        epoch, batch = self._step
        if not self._order:
            epoch, batch = epoch + 1, 0
            if epoch >= self.plan.epochs:
                return None
            perm = self._rng.permutation(self.n_samples).astype(np.int64)
            size = self.plan.batch_size
            self._order = [perm[i:i + size] for i in range(0, perm.size, size)]
            if self._mechanism is not None:  # charge first, then draw
                self._noise = self._ledger.release(
                    self._mechanism, np.zeros(self.n_samples, dtype=np.int64),
                    label=f"vertical LR label noise, epoch {epoch}", rng=self._secure)
        else:
            batch += 1
        self._rows = self._order.pop(0)
        self._step = (epoch, batch)
        return encode({"stage": "batch", "epoch": epoch, "batch": batch,
                       "task": self.plan.task, "link": self.plan.link, "rows": self._rows})

    def residual(self, scores: dict[str, bytes]) -> bytes:
        """The hosts' encrypted scores -> the encrypted residual message for every host."""
        pk = self._need_key()
        if self._rows is None or set(scores) != set(self.hosts):
            raise ProtocolError(f"scores from {sorted(scores)}; the guest expects one message "
                                f"from each of {self.hosts} for batch {self._step}")
        size = self._rows.size
        total, powers = None, []
        for host in self.hosts:
            msg = read_message(scores[host], "scores", host)
            if (msg.get("party"), msg.get("epoch"), msg.get("batch")) != (host, *self._step):
                raise ProtocolError(f"message from {host!r}: scores for "
                                    f"{msg.get('epoch')!r}/{msg.get('batch')!r}, expected "
                                    f"{self._step}")
            enc = read_ciphertexts(msg.get("cts"), pk, size, host)
            total = enc if total is None else total + enc
            extra = msg.get("powers")
            if not isinstance(extra, list) or len(extra) != (2 if self.plan.link == "cubic"
                                                            else 0):
                raise ProtocolError(f"message from {host!r}: the powers of the scores do not "
                                    f"match link {self.plan.link!r}")
            powers = [read_ciphertexts(blob, pk, size, host) for blob in extra]
        y = self._y[self._rows]
        target = 2.0 * (2.0 * y - 1.0) if self.plan.task == "logistic" else y
        own = np.rint(self._X[self._rows] @ self.coef_ * 2.0 ** F).astype(np.int64)
        if self.plan.link == "taylor2":
            plain = own - np.rint(target * 2.0 ** F).astype(np.int64)
            residual = total + plain.astype(object)
        else:   # E(z^3) = g^3 + 3 g^2 E(u) + 3 g E(u^2) + E(u^3), z = g + u (one host)
            g = own.astype(object)
            cube = total * (3 * g * g) + powers[0] * (3 * g) + powers[1] + g * g * g
            c1, c3 = (round(c * 2 ** _K) for c in self.plan.coefficients)
            shift = 2 ** (2 * F)
            residual = (total + g) * (c1 * shift) + cube * c3 - np.array(
                [round(t * 2.0 ** F) * 2 ** (2 * F + _K) for t in target], dtype=object)
        self._clean = residual.rerandomize(pool=self._pool, rng=self._secure)
        sent = self._clean
        if self._noise is not None:
            sent = (self._clean + self._noise[self._rows].astype(object)).rerandomize(
                pool=self._pool, rng=self._secure)
        epoch, batch = self._step
        return encode({"stage": "residual", "epoch": epoch, "batch": batch,
                       "cts": serialization.dumps(sent)})

    def gradient(self) -> bytes:
        """The guest's own masked gradient message for the arbiter."""
        if self._clean is None:
            raise ProtocolError("the guest has no residual for this batch yet")
        out = self._masked_gradient(self._clean)
        self._clean = None
        return out


class Arbiter:
    """The key holder (sans-I/O): publishes the public key, decrypts masked gradients.

    ``parties``: the names it serves with the number of gradient entries of each (their
    feature counts, public metadata agreed at set-up). ``rng``: key generation (None: the
    CSPRNG; a seed only in tests). ``short_exponents``: the key's encryption noise uses
    DJN's short exponents (about 3.5x faster encryption for the guest and hosts, under the
    extra assumption stated in :mod:`veil.crypto.paillier`).
    """

    def __init__(self, parties: dict[str, int], *, key_bits: int = 2048,
                 insecure_ok: bool = False, short_exponents: bool = False,
                 keys: tuple | None = None, rng: Any = None) -> None:
        self.parties = {str(k): check_int(v, f"parties[{k!r}]", low=1)
                        for k, v in parties.items()}
        if keys is None:
            keys = paillier.keygen(key_bits, insecure_ok=insecure_ok,
                                   short_exponents=short_exponents, rng=check_rng(rng))
        self.public_key, self._sk = keys
        self._last = {p: (-1, -1) for p in self.parties}
        self.traffic = 0

    def key_message(self) -> bytes:
        return encode({"stage": "key", "key": serialization.dumps(self.public_key)})

    def decrypt(self, message: bytes) -> bytes:
        """A party's masked gradient -> its decryption, for that party only."""
        msg = read_message(message, "gradient", "a party")
        party, step = _gradient_step(msg, self.parties, self._last, "the arbiter")
        cts = read_ciphertexts(msg.get("cts"), self.public_key, self.parties[party], party)
        self._last[party] = step
        values = [int(v) for v in np.asarray(self._sk.decrypt(cts)).ravel()]
        answer = encode({"stage": "decrypted", "party": party, "epoch": step[0],
                         "batch": step[1], "values": values})
        self.traffic += len(answer)
        return answer


def _gradient_step(msg: dict, parties: dict[str, int], last: dict, who: str) -> tuple:
    """(owner, epoch, batch) of a gradient message, checked against ``last`` (no replay)."""
    party = msg.get("party")
    if party not in parties:
        raise ProtocolError(f"message to {who} from {party!r}: not a gradient from a known "
                            f"party ({sorted(parties)})")
    step = (msg.get("epoch"), msg.get("batch"))
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in step) or \
            step <= last[party]:
        raise ProtocolError(f"message from {party!r}: epoch/batch {step} is replayed or out "
                            "of order")
    return party, step


class ShareHolder:
    """One party's share of an n-of-n threshold key (sans-I/O): partially decrypts the
    masked gradients of every party, for their owner only."""

    def __init__(self, name: str, share: threshold.KeyShare, parties: dict[str, int], *,
                 rng: Any = None) -> None:
        self.name = str(name)
        self._share = share
        self.parties = dict(parties)
        self._last = {p: (-1, -1) for p in self.parties}
        self._rng = check_rng(rng)

    def partial(self, message: bytes) -> bytes:
        """A masked gradient message -> this holder's partial decryption for its owner."""
        msg = read_message(message, "gradient", "a party")
        owner, step = _gradient_step(msg, self.parties, self._last, repr(self.name))
        cts = read_ciphertexts(msg.get("cts"), self._share.public_key, self.parties[owner], owner)
        self._last[owner] = step
        part = self._share.partial_decrypt(cts)
        return encode({"stage": "partial", "party": owner, "by": self.name, "epoch": step[0],
                       "batch": step[1], "partial": serialization.dumps(part)})


def combine(public_key: threshold.ThresholdPublicKey, gradient: bytes,
            partials: dict[str, bytes]) -> bytes:
    """At the owner: its own masked gradient message and every holder's partial
    decryption -> the "decrypted" message :meth:`update` takes (proofs are verified; a bad
    one is a ProtocolError naming its sender)."""
    msg = read_message(gradient, "gradient", "self")
    owner, step = msg.get("party"), (msg.get("epoch"), msg.get("batch"))
    cts = serialization.loads(msg.get("cts"), public_key=public_key)
    parts = []
    for by, blob in partials.items():
        part = read_message(blob, "partial", by)
        if (part.get("party"), part.get("epoch"), part.get("batch")) != (owner, *step):
            raise ProtocolError(f"message from {by!r}: a partial decryption for another "
                                "gradient")
        try:
            parts.append(serialization.loads(part.get("partial"), public_key=public_key))
        except CryptoError as exc:
            raise ProtocolError(f"message from {by!r}: bad partial decryption: {exc}") \
                from None
    try:
        values = public_key.combine(parts, cts)
    except CryptoError as exc:
        raise ProtocolError(f"partial decryptions for {owner!r}: {exc}") from None
    return encode({"stage": "decrypted", "party": owner, "epoch": step[0], "batch": step[1],
                   "values": [int(v) for v in np.asarray(values).ravel()]})


class ThresholdDecryption:
    """The local composition of threshold decryption, in the Arbiter's place: a dealer
    deals an n-of-n key among ``parties`` once (the dealer must then forget it: veil has
    no distributed Paillier key generation), each party's :class:`ShareHolder`
    partially decrypts, the owner :func:`combine` s. ``traffic``: bytes of the partials."""

    def __init__(self, parties: dict[str, int], *, key_bits: int = 2048,
                 insecure_ok: bool = False, keys: tuple | None = None, rng: Any = None
                 ) -> None:
        self.parties = {str(k): check_int(v, f"parties[{k!r}]", low=1)
                        for k, v in parties.items()}
        names = list(self.parties)
        if keys is None:
            keys = threshold.keygen(key_bits, parties=len(names), threshold=len(names),
                                    insecure_ok=insecure_ok, rng=check_rng(rng))
        self.public_key, shares = keys
        if len(shares) != len(names) or self.public_key.threshold != len(names):
            raise ConfigError(f"keys must be an n-of-n threshold key for the {len(names)} "
                              "parties")
        self.holders = [ShareHolder(n, s, self.parties) for n, s in zip(names, shares)]
        self.traffic = 0

    def key_message(self) -> bytes:
        return encode({"stage": "key", "key": serialization.dumps(self.public_key)})

    def decrypt(self, message: bytes) -> bytes:
        partials = {h.name: h.partial(message) for h in self.holders}
        self.traffic += sum(len(p) for p in partials.values())
        return combine(self.public_key, message, partials)

