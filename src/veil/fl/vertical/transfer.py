"""Federated transfer learning: a source model shared by distillation, then federated
fine-tuning among the target parties.

The recipe (the seed material's; Pan & Yang 2010 for transfer learning, Hinton, Vinyals &
Dean 2015 for distillation):

1. the *source* party, rich in labeled data of a related domain, trains a model (or, for
   DP, ``teachers`` models on disjoint parts of its data);
2. it answers a query of unlabeled *transfer* inputs (public data of the target domain;
   the targets' own inputs would be revealed to the source) with soft labels
   (:class:`SourceParty`, sans-I/O: a query message in, a soft-label message out);
3. the target side distills a student network on those soft labels (:func:`distill`);
4. the target parties fine-tune the student with veil's horizontal federated learning
   (:class:`veil.fl.Federation`, any strategy, starting from the distilled weights; the
   whole recipe, wired to a federation and its runtime:
   :func:`veil.experiments.vertical_run.transfer_learn`).

Nothing of the source's data or model leaves the source except the soft labels.

PATE-style noisy aggregation (Papernot, Abadi, Erlingsson, Goodfellow & Talwar 2017;
Gaussian noise as in Papernot, Song, Mironov, Raghunathan, Talwar & Erlingsson 2018):
with ``noise_multiplier`` sigma the source answers each transfer input with the vote
histogram of its teachers (each votes its argmax) plus N(0, sigma^2) per class, clipped at
0 and normalized into a soft label. The width of that histogram is ``classes``, declared
(public schema knowledge): never read from the labels, where one relabelled record could
add a column; a label outside ``0..classes-1`` is refused before anything trains or is
charged.

**Neighbour relation: add/remove of one source record.** Each record goes to the teacher
``H_k(record) mod teachers``, H_k a keyed hash (BLAKE2b keyed with k drawn once from
``rng``) of the record's bytes (features and label), so where a record goes depends on
that record alone. For neighbours D and D' = D + {x} under the same key, every record of
D is in the same teacher's part in both, in the same order, and each teacher's training
randomness is drawn independently of the data: only teacher H_k(x) trains on different
data, so x changes at most one vote per query: two histogram cells by 1, an L2
sensitivity of sqrt(2). (A permutation cut into equal slices would not do: adding one
record moves every slice boundary, and with it records between teachers.) Each query is
then a Gaussian mechanism of noise multiplier sigma / sqrt(2) for every key, hence also
for the random key; the source's :class:`~veil.dp.Ledger` is charged the composition over
the queried rows before any noise is drawn (the data-independent bound; PATE's
data-dependent analysis is tighter but needs smooth sensitivity to be released, not done
here). Replace-one (a record changed in place) is two such steps: twice the sensitivity,
not what is charged. A teacher's part holds n / teachers records in expectation and may
be empty (that teacher votes with its initial weights). Without noise the soft labels are
the teachers' averaged class probabilities: no privacy claim.

The secure federated transfer learning of Liu, Kang, Xing, Chen & Yang (2018), a shared
representation learned on the overlapping samples under HE or secret sharing, is in
:mod:`veil.fl.vertical.secure_ftl` and :mod:`veil.fl.vertical.secure_ftl_ss`.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._optional import require
from veil._validation import check_array, check_int, check_positive
from veil.dp import Ledger
from veil.errors import (
    BudgetExceededError,
    ConfigError,
    DataError,
    ProtocolError,
)
from veil.fl.messages import decode, encode
from veil.fl.vertical._noise import grid_gaussian
from veil.random import check_rng

__all__ = ["SourceParty", "distill", "teacher_of", "train_module"]

log = logging.getLogger(__name__)


def _torch() -> Any:
    return require("torch", "torch", "transfer learning")


def train_module(module: Any, X: np.ndarray, targets: np.ndarray, *, epochs: int,
                 batch_size: int, learning_rate: float, rng: Any = None) -> Any:
    """Adam on the cross-entropy of ``module``'s logits against ``targets``: integer
    labels (n,) or soft labels (n, K). Trains ``module`` in place and returns it."""
    torch = _torch()
    X = torch.as_tensor(np.asarray(X, dtype=np.float32))
    soft = np.ndim(targets) == 2
    t = torch.as_tensor(np.asarray(targets, dtype=np.float32 if soft else np.int64))
    opt = torch.optim.Adam(module.parameters(), lr=check_positive(learning_rate,
                                                                  "learning_rate"))
    rng = check_rng(rng)
    n = X.shape[0]
    module.train()
    for _ in range(check_int(epochs, "epochs", low=1)):
        order = torch.as_tensor(rng.permutation(n))
        for i in range(0, n, batch_size):
            rows = order[i:i + batch_size]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(module(X[rows]), t[rows]).backward()
            opt.step()
    return module


def teacher_of(X: np.ndarray, y: np.ndarray, teachers: int, key: bytes) -> np.ndarray:
    """Each record's teacher, ``H_key(row bytes || label bytes) mod teachers`` (BLAKE2b,
    64-bit digest; the modulo bias is below teachers / 2^64): a record's teacher depends
    on that record and the key only (module docstring)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    digests = [hashlib.blake2b(X[i].tobytes() + y[i].tobytes(), key=key,
                               digest_size=8).digest() for i in range(y.size)]
    hashes = np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64)
    return (hashes % np.uint64(teachers)).astype(np.int64)


class SourceParty:
    """The data-rich party: trains ``teachers`` models on disjoint parts of its data and
    answers transfer queries with soft labels (module docstring).

    ``make_module(d, K)`` builds a network; ``classes``: K, the declared number of classes
    (labels ``0..K-1``; public, never read from ``y``); ``max_queries``: the most transfer
    rows it will label (its own plan; with ``noise_multiplier`` the whole plan must fit
    ``ledger``). ``rng``: simulation randomness (the teachers' hash key, their training);
    ``noise_rng``: the vote noise (None: the CSPRNG).
    """

    #: the neighbour relation of the noisy soft labels' certificate (module docstring)
    relation = "add/remove one source record"

    def __init__(self, X: Any, y: Any, make_module: Callable[[int, int], Any], *,
                 classes: int, teachers: int = 1, epochs: int = 10, batch_size: int = 128,
                 learning_rate: float = 1e-3, noise_multiplier: float | None = None,
                 ledger: Ledger | None = None, max_queries: int = 10_000,
                 rng: Any = None, noise_rng: Any = None) -> None:
        self.classes = check_int(classes, "classes", low=2)
        X = check_array(X, "X of the source", ndim=2)
        y = check_array(y, "y of the source", ndim=1, dtype=np.int64)
        if y.size != X.shape[0]:
            raise DataError(f"y of the source has {y.size} labels for {X.shape[0]} rows of X")
        if np.any((y < 0) | (y >= self.classes)):  # names no label of the data
            raise DataError(f"y of the source holds labels outside the declared classes="
                            f"{self.classes} (allowed: 0..{self.classes - 1})")
        self.teachers = check_int(teachers, "teachers", low=1)
        self.max_queries = check_int(max_queries, "max_queries", low=1)
        self.noise_multiplier = None if noise_multiplier is None else \
            check_positive(noise_multiplier, "noise_multiplier")
        if self.noise_multiplier is not None:
            if ledger is None:
                raise ConfigError("noise_multiplier needs ledger= (the source's Ledger)")
            if not ledger.fits(self._event(self.max_queries)):
                raise BudgetExceededError(f"max_queries={max_queries} noisy answers with "
                                          f"noise_multiplier={noise_multiplier} do not fit the "
                                          "source's ledger; nothing was charged")
        self._ledger = ledger
        self._rng = check_rng(rng)              # the teachers' hash key and training
        self._noise_rng = check_rng(noise_rng)  # the vote noise: the CSPRNG unless tests
        self.n_features = X.shape[1]
        owner = teacher_of(X, y, self.teachers, self._rng.bytes(32))
        self.models = [train_module(make_module(X.shape[1], self.classes), X[owner == t],
                                    y[owner == t], epochs=epochs, batch_size=batch_size,
                                    learning_rate=learning_rate, rng=r)
                       for t, r in enumerate(self._rng.spawn(self.teachers))]
        self._answered = 0

    def _event(self, rows: int) -> de.DpEvent:
        return de.SelfComposedDpEvent(de.GaussianDpEvent(self.noise_multiplier / math.sqrt(2)),
                                      rows)

    def answer(self, query: bytes) -> bytes:
        """A transfer query (unlabeled rows) -> their soft labels."""
        torch = _torch()
        try:
            msg = decode(query)
        except ProtocolError as exc:
            raise ProtocolError(f"message from 'target': {exc}") from None
        X = msg.get("X") if isinstance(msg, dict) and msg.get("stage") == "query" else None
        if not (isinstance(X, np.ndarray) and X.dtype == np.float32 and X.ndim == 2
                and X.shape[1] == self.n_features and X.shape[0] > 0
                and np.all(np.isfinite(X))):
            raise ProtocolError(f"message from 'target': not a query of finite float32 rows "
                                f"with {self.n_features} features")
        if self._answered + X.shape[0] > self.max_queries:
            raise ProtocolError(f"message from 'target': {X.shape[0]} more rows would exceed "
                                f"the source's max_queries={self.max_queries}")
        inputs = torch.as_tensor(X)
        with torch.no_grad():
            outs = [m.eval()(inputs) for m in self.models]
        if self.noise_multiplier is None:
            soft = np.mean([torch.softmax(o, 1).numpy() for o in outs], axis=0)
        else:
            self._ledger.charge(self._event(X.shape[0]),
                                label=f"transfer soft labels, {X.shape[0]} rows ({self.relation})")
            votes = np.zeros((X.shape[0], self.classes))
            for o in outs:
                votes[np.arange(X.shape[0]), o.argmax(1).numpy()] += 1
            noisy = np.clip(grid_gaussian(votes, self.noise_multiplier, self._noise_rng), 0.0, None)
            total = noisy.sum(axis=1, keepdims=True)
            soft = np.where(total > 0, noisy / np.where(total > 0, total, 1.0),
                            1.0 / self.classes)
        self._answered += X.shape[0]
        return encode({"stage": "soft_labels", "q": soft.astype(np.float32)})


def distill(module: Any, X: Any, answer: bytes, *, epochs: int = 20, batch_size: int = 128,
            learning_rate: float = 1e-3, rng: Any = None) -> Any:
    """Train a copy of ``module`` on the source's soft labels for the transfer rows ``X``."""
    try:
        msg = decode(answer)
    except ProtocolError as exc:
        raise ProtocolError(f"message from 'source': {exc}") from None
    q = msg.get("q") if isinstance(msg, dict) and msg.get("stage") == "soft_labels" else None
    X = check_array(X, "X (transfer rows)", ndim=2)
    if not (isinstance(q, np.ndarray) and q.dtype == np.float32 and q.ndim == 2
            and q.shape[0] == X.shape[0] and np.all(np.isfinite(q)) and np.all(q >= 0)
            and np.allclose(q.sum(axis=1), 1.0, atol=1e-3)):
        raise ProtocolError("message from 'source': the soft labels are not one probability "
                            "row per transfer row")
    return train_module(copy.deepcopy(module), X, q, epochs=epochs, batch_size=batch_size,
                        learning_rate=learning_rate, rng=rng)
