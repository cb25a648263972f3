"""Secure federated transfer learning (Liu, Kang, Xing, Chen & Yang, "A Secure Federated
Transfer Learning Framework", IEEE Intelligent Systems 2020, arXiv:1812.03337), HE variant.

Two parties with different features: the *source* A holds ``X_A`` and labels ``y`` in
{-1, +1} for all its rows; the *target* B holds ``X_B`` and no labels. Some people are in
both tables (the overlap, aligned by PSI beforehand: row ``i`` of ``X_A[ov_A]`` and of
``X_B[ov_B]`` are one person). Each party trains its own representation network (one layer,
``u = tanh([x, 1] W)``, ``dim`` outputs) so that B's representations predict A's labels:

    Phi = (1 / N_A) sum_{k in A} y_k u_A,k         phi_j = Phi . u_B,j   (B's prediction)

Loss over a batch S of overlapping people (Liu et al. eq. 7-9; the logistic loss replaced by
its second-order Taylor expansion, their eq. 10, so that every gradient is linear in what
the other party encrypts)::

    L = (1/|S|) sum_{i in S} [log 2 - y_i phi_i / 2 + phi_i^2 / 8 + gamma ||u_A,i - u_B,i||^2]
        + (lam / 2)(||W_A||^2 + ||W_B||^2)

    dL/du_B,i = (1/|S|)(-y_i Phi / 2 + (Phi Phi^T / 4) u_B,i + 2 gamma (u_B,i - u_A,i))
    dL/dPhi   = (1/|S|) sum_{i in S} (-y_i u_B,i / 2 + (u_B,i u_B,i^T / 4) Phi)
    dL/du_A,k = (y_k / N_A) dL/dPhi + [k in S] (2 gamma / |S|)(u_A,k - u_B,k)

and ``dL/dW = [X, 1]^T (dL/du * (1 - u^2))`` for either network.

One iteration (their Algorithm 1; each party has its own Paillier key pair, values in fixed
point with F = 16 fractional bits):

1. A -> B, under A's key: ``[[a_i]] = [[-y_i Phi / 2 - 2 gamma u_A,i]]`` (i in S) and
   ``[[Phi Phi^T / 4]]``;
   B -> A, under B's key: ``[[u_B,i]]`` (i in S) and ``[[sum_{i in S} u_B,i u_B,i^T / 4]]``;
2. B forms ``[[dL/dW_B]]`` from A's ciphertexts with its own plaintexts (additions and
   plaintext multiplications only), adds a uniform mask R_B of ``key bits - 8`` bits and
   sends it to A; A likewise forms ``[[dL/dW_A]] + R_A`` under B's key and sends it to B;
3. each decrypts the other's masked gradient and returns it; each removes its mask and
   steps ``W <- W - lr (dL/dW + lam W)``.

Prediction for B's people (their section "inference"): A sends ``[[Phi]]`` under its key,
B returns ``[[Phi . u_B,j + r_j]]`` masked, A decrypts, B removes r_j.

Networks: one layer here. A deeper network's backward pass is linear in the encrypted
``dL/du`` too (products with each party's own activations, derivatives and weights, all
plaintexts), so it could run on ciphertexts: each extra layer of width h would cost a party
about ``(h + 1) |S| dim + |S| dim h`` ciphertext-by-plaintext exponentiations per iteration
(~130,000 for h = 16, |S| = 500, dim = 8, beside the 8,064 encryptions of an iteration
today) and ``2F`` more bits of scale; not built. :mod:`veil.fl.vertical.secure_ftl_ss`
(secret sharing) trains MLPs.

Threat model: two semi-honest parties. A sees only B's ciphertexts and B's masked
gradients (statistically hidden, 2^-(key bits - 8 - bits of the gradient)); B likewise.
Each learns its own gradients (as in Liu et al.) and B learns its predictions phi_j.
Malicious parties are not covered; every message is still checked (stage, step, shapes,
ciphertexts valid under the expected key) and a bad one is a ProtocolError.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from veil._validation import check_int
from veil.crypto import paillier, serialization
from veil.errors import ConfigError, CryptoError, DataError, ProtocolError
from veil.fl.messages import encode
from veil.fl.vertical._ftl import FTLParty, FTLStats, signed_labels
from veil.fl.vertical._wire import read_message
from veil.fl.vertical.paillier_lr import (
    FX,
    FixedPointFeatures,
    read_ciphertexts,
    read_public_key,
)
from veil.random import check_rng

__all__ = ["FTLSource", "FTLTarget", "FTLStats", "train_secure_ftl", "predict_secure_ftl"]

log = logging.getLogger(__name__)

F = 16
#: the scale of a gradient: F (u) + 2F (coefficients) + FX (features, as in paillier_lr)
G = 3 * F + FX
_MASK_MARGIN = 8


def _fixed(x: np.ndarray, bits: int = F) -> np.ndarray:
    """``round(x 2^bits)`` as Python ints (an object array; exact for any ``bits``)."""
    scaled = np.rint(np.asarray(x, dtype=np.float64) * 2.0 ** bits)
    out = np.empty(scaled.shape, dtype=object)
    out.ravel()[:] = [int(v) for v in scaled.ravel()]
    return out


class _Party(FTLParty):
    """What A and B share: a key pair, a one-layer network, the masked-gradient round trip."""

    name = "party"
    peer = "peer"

    def __init__(self, X: Any, overlap: Any, *, peer_features: int, dim: int = 8,
                 learning_rate: float = 0.1, gamma: float = 0.1, lam: float = 0.0,
                 key_bits: int = 2048, insecure_ok: bool = False, rng: Any = None,
                 crypto_rng: Any = None) -> None:
        super().__init__(X, overlap, dim=dim, learning_rate=learning_rate, gamma=gamma,
                         lam=lam, rng=rng)
        self._Xa = np.hstack([self._X, np.ones((self._X.shape[0], 1))])
        self._features = FixedPointFeatures(self._Xa, self.name)
        self._peer_rows = check_int(peer_features, "peer_features", low=1) + 1
        self._min_bits = 256 if insecure_ok else paillier.MIN_SECURE_BITS
        self._secure = check_rng(crypto_rng)       # keys, encryption, masks: the CSPRNG
        self.pk, self._sk = paillier.keygen(key_bits, insecure_ok=insecure_ok,
                                            rng=self._secure)
        self.peer_pk: paillier.PublicKey | None = None
        self._step = -1
        self._batch: np.ndarray | None = None
        self._mask: np.ndarray | None = None

    @property
    def W(self) -> np.ndarray:  # noqa: N802 - the paper's name
        """The one layer's weights (the last row the bias)."""
        return self.net.weights[0]

    def key_message(self) -> bytes:
        return encode({"stage": "ftl-key", "party": self.name,
                       "key": serialization.dumps(self.pk)})

    def receive_key(self, message: bytes) -> None:
        msg = read_message(message, "ftl-key", self.peer)
        key = msg.get("key")
        if not isinstance(key, bytes):
            raise ProtocolError(f"message from {self.peer!r}: the public key is not bytes")
        self.peer_pk = read_public_key(key, self.peer, self._min_bits, self.name)

    def _peer_key(self) -> paillier.PublicKey:
        if self.peer_pk is None:
            raise ProtocolError(f"{self.name!r} has no key of {self.peer!r} yet")
        return self.peer_pk

    def _read(self, message: bytes, stage: str) -> dict:
        msg = read_message(message, stage, self.peer)
        if msg.get("step") != self._step:
            raise ProtocolError(f"message from {self.peer!r}: step {msg.get('step')!r}; "
                                f"{self.name!r} is at step {self._step}")
        return msg

    def _transpose_times(self, rows: np.ndarray, S: paillier.EncryptedArray
                         ) -> paillier.EncryptedArray:
        """``[[Xa[rows]^T S]]`` (Xa in units of 2^-FX): one Pippenger multi-exponentiation
        per feature and column of S (:class:`veil.fl.vertical.paillier_lr.FixedPointFeatures`)."""
        columns = [self._features.gradient(rows, S[:, k]) for k in range(S.shape[1])]
        raw = np.empty((self._Xa.shape[1], S.shape[1]), dtype=object)
        for k, column in enumerate(columns):
            raw[:, k] = column
        return paillier.EncryptedArray(S.public_key, raw)

    def _masked(self, grad: paillier.EncryptedArray) -> bytes:
        """This party's encrypted gradient (under the peer's key) plus a fresh mask."""
        pk = self._peer_key()
        self._mask = np.empty(grad.shape, dtype=object)
        self._mask.ravel()[:] = [self._secure.randbits(pk.bits - _MASK_MARGIN)
                                 for _ in range(grad.size)]
        return encode({"stage": "ftl-gradient", "party": self.name, "step": self._step,
                       "cts": serialization.dumps(grad + self._mask)})

    def decrypt_for_peer(self, message: bytes) -> bytes:
        """The peer's masked gradient (under this party's key) -> its decryption."""
        msg = self._read(message, "ftl-gradient")
        cts = read_ciphertexts(msg.get("cts"), self.pk, (self._peer_rows, self.dim), self.peer)
        values = self._sk.decrypt(cts)
        return encode({"stage": "ftl-decrypted", "step": self._step,
                       "values": [int(v) for v in values.ravel()]})

    def update(self, message: bytes) -> None:
        """The peer's decryption of this party's masked gradient -> one step."""
        msg = self._read(message, "ftl-decrypted")
        values = msg.get("values")
        if self._mask is None or not isinstance(values, list) or \
                len(values) != self._mask.size or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ProtocolError(f"message from {self.peer!r}: {len(values or [])} values for "
                                f"a gradient of {0 if self._mask is None else self._mask.size}")
        raw = np.array(values, dtype=object).reshape(self._mask.shape) - self._mask
        grad = raw.astype(np.float64) / (2.0 ** G * self._batch.size)
        if not np.all(np.isfinite(grad)):
            raise ProtocolError(f"message from {self.peer!r}: the gradient is not finite")
        self.net.step([grad], self.learning_rate, self.lam)
        self._mask = None


class FTLSource(_Party):
    """Party A (sans-I/O): features, labels in {0, 1} or {-1, +1}, the overlap rows (its
    row of each overlapping person, in the aligned order); ``peer_features``: B's feature
    count (public metadata); the network and training settings as keywords (``dim``,
    ``learning_rate``, ``gamma``: the alignment weight, ``lam``: L2, ``key_bits``). ``rng``:
    the initial weights (simulation); ``crypto_rng``: keys, encryption and masks (None, the
    default: the CSPRNG; a seed only in tests)."""

    name, peer = "source", "target"

    def __init__(self, X: Any, y: Any, overlap: Any, **kw: Any) -> None:
        super().__init__(X, overlap, **kw)
        self._y = signed_labels(y, self._X.shape[0])

    def phi(self) -> np.ndarray:
        """Phi = mean of y_k u_A,k over A's rows."""
        return (self._y[:, None] * self.represent()).mean(axis=0)

    def forward(self, step: int, batch: Any) -> bytes:
        """Start ``step`` on ``batch`` (positions in the overlap): A's ciphertexts for B."""
        batch = np.asarray(batch, dtype=np.int64)
        if step <= self._step or batch.ndim != 1 or not batch.size or batch.min() < 0 or \
                batch.max() >= self.overlap.size:
            raise ConfigError(f"step {step} / batch: a new step and positions in the overlap")
        self._step, self._batch = step, batch
        u, phi = self.represent(), self.phi()
        rows = self.overlap[batch]
        a = -0.5 * self._y[rows, None] * phi - 2 * self.gamma * u[rows]
        self._u, self._phi = u, phi
        return encode({"stage": "ftl-source", "step": step, "batch": batch,
                       "a": serialization.dumps(self.pk.encrypt(_fixed(a, 2 * F),
                                                                rng=self._secure)),
                       "m": serialization.dumps(self.pk.encrypt(
                           _fixed(np.outer(phi, phi) / 4), rng=self._secure))})

    def gradient(self, message: bytes) -> bytes:
        """B's ciphertexts -> A's masked gradient under B's key."""
        msg = self._read(message, "ftl-target")
        pk, S, d = self._peer_key(), self._batch.size, self.dim
        enc_u = read_ciphertexts(msg.get("u"), pk, (S, d), self.peer)
        enc_k = read_ciphertexts(msg.get("k"), pk, (d, d), self.peer)
        u, phi, rows = self._u, self._phi, self.overlap[self._batch]
        y = self._y
        deriv = 1.0 - u * u
        # [[dL/dPhi]] * |S| at scale 2F
        v = (_fixed(-0.5 * y[rows]) @ enc_u) + enc_k.dot(_fixed(phi))
        P = self._Xa.T @ ((y / y.size)[:, None] * deriv)           # (d_in + 1, dim)
        term1 = v.reshape(1, d) * _fixed(P, F + FX)                  # scale G
        term2 = self._transpose_times(rows, enc_u * _fixed(-2 * self.gamma * deriv[rows],
                                                           2 * F))
        term3 = self._Xa[rows].T @ (deriv[rows] * 2 * self.gamma * u[rows])
        return self._masked(term1 + term2 + _fixed(term3, G))


class FTLTarget(_Party):
    """Party B (sans-I/O): features and the overlap rows; no labels (keywords as
    :class:`FTLSource`)."""

    name, peer = "target", "source"

    def forward(self, message: bytes) -> bytes:
        """A's step message -> B's ciphertexts for A (and B keeps A's for its gradient)."""
        msg = read_message(message, "ftl-source", self.peer)
        step, batch = msg.get("step"), msg.get("batch")
        if not isinstance(step, int) or isinstance(step, bool) or step <= self._step:
            raise ProtocolError(f"message from {self.peer!r}: step {step!r} is replayed or "
                                "out of order")
        if not (isinstance(batch, np.ndarray) and batch.dtype == np.int64 and batch.ndim == 1
                and batch.size and batch.min() >= 0 and batch.max() < self.overlap.size
                and np.unique(batch).size == batch.size):
            raise ProtocolError(f"message from {self.peer!r}: the batch is not distinct "
                                f"positions in the overlap of {self.overlap.size}")
        d, S = self.dim, batch.size
        self._a = read_ciphertexts(msg.get("a"), self._peer_key(), (S, d), self.peer)
        self._m = read_ciphertexts(msg.get("m"), self._peer_key(), (d, d), self.peer)
        self._step, self._batch = step, batch
        u = self.represent()[self.overlap[batch]]
        self._u = u
        return encode({"stage": "ftl-target", "step": step,
                       "u": serialization.dumps(self.pk.encrypt(_fixed(u), rng=self._secure)),
                       "k": serialization.dumps(self.pk.encrypt(_fixed(u.T @ u / 4),
                                                                rng=self._secure))})

    def gradient(self) -> bytes:
        """B's masked gradient under A's key (from A's ciphertexts of this step)."""
        u, rows = self._u, self.overlap[self._batch]
        g = self._a + self._m.dot(_fixed(u).T).T + _fixed(2 * self.gamma * u, 2 * F)
        s = g * _fixed(1.0 - u * u)                                  # scale 3F
        return self._masked(self._transpose_times(rows, s))         # scale G

    def score_request(self, message: bytes, X: Any) -> bytes:
        """A's ``[[Phi]]`` -> masked ``[[Phi . u_B,j]]`` for B's rows ``X``."""
        msg = read_message(message, "ftl-phi", self.peer)
        phi = read_ciphertexts(msg.get("phi"), self._peer_key(), (self.dim,), self.peer)
        u = self.represent(X)
        self._score_mask = np.array([self._secure.randbits(self._peer_key().bits
                                                           - _MASK_MARGIN)
                                     for _ in range(len(u))], dtype=object)
        enc = phi.dot(_fixed(u).T) + self._score_mask                # scale 2F
        return encode({"stage": "ftl-score", "cts": serialization.dumps(enc)})

    def scores(self, message: bytes) -> np.ndarray:
        """A's decryption of the masked scores -> phi_j for B's rows."""
        msg = read_message(message, "ftl-scores", self.peer)
        values = msg.get("values")
        if not isinstance(values, list) or len(values) != len(self._score_mask):
            raise ProtocolError(f"message from {self.peer!r}: {len(values or [])} scores for "
                                f"{len(self._score_mask)} rows")
        raw = np.array(values, dtype=object) - self._score_mask
        return raw.astype(np.float64) / 2.0 ** (2 * F)


def _phi_message(source: FTLSource) -> bytes:
    return encode({"stage": "ftl-phi", "phi": serialization.dumps(
        source.pk.encrypt(_fixed(source.phi()), rng=source._secure))})


def _decrypt_scores(source: FTLSource, message: bytes) -> bytes:
    msg = read_message(message, "ftl-score", source.peer)
    cts = msg.get("cts")
    try:
        arr = serialization.loads(cts, public_key=source.pk)
    except CryptoError as exc:
        raise ProtocolError(f"message from 'target': bad ciphertexts: {exc}") from None
    if not isinstance(arr, paillier.EncryptedArray) or arr.ndim != 1:
        raise ProtocolError("message from 'target': expected a vector of ciphertexts")
    return encode({"stage": "ftl-scores",
                   "values": [int(v) for v in source._sk.decrypt(arr)]})


def train_secure_ftl(source: FTLSource, target: FTLTarget, iterations: int, *,
                     batch_size: int = 500, rng: Any = None) -> FTLStats:
    """Run the protocol in this process (every message as bytes, counted): keys, then
    ``iterations`` steps on batches of the overlap drawn with ``rng`` (simulation)."""
    if source.overlap.size != target.overlap.size:
        raise DataError(f"the overlaps have {source.overlap.size} and {target.overlap.size} "
                        "rows; align them first")
    iterations = check_int(iterations, "iterations", low=1)
    batch_size = check_int(batch_size, "batch_size", low=1)
    rng = check_rng(rng)
    target.receive_key(source.key_message())
    source.receive_key(target.key_message())
    stats = FTLStats()
    for step in range(iterations):
        start = time.perf_counter()
        batch = rng.permutation(source.overlap.size)[:batch_size].astype(np.int64)
        to_b = source.forward(step, batch)
        to_a = target.forward(to_b)
        grad_a, grad_b = source.gradient(to_a), target.gradient()
        dec_for_a, dec_for_b = target.decrypt_for_peer(grad_a), source.decrypt_for_peer(grad_b)
        source.update(dec_for_a)
        target.update(dec_for_b)
        stats.seconds.append(time.perf_counter() - start)
        stats.bytes.append({"source": len(to_b) + len(grad_a) + len(dec_for_b),
                            "target": len(to_a) + len(grad_b) + len(dec_for_a)})
    return stats


def predict_secure_ftl(source: FTLSource, target: FTLTarget, X: Any) -> np.ndarray:
    """B's scores phi_j = Phi . u_B,j for its rows ``X`` (three messages; the sign is the
    predicted label)."""
    request = target.score_request(_phi_message(source), X)
    return target.scores(_decrypt_scores(source, request))
