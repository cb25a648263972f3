"""Vertical linear and logistic regression as scikit-learn estimators, on two protocols.

``protocol="paillier"``: the FATE-style protocol of :mod:`veil.fl.vertical.paillier_lr`
(guest, hosts and an arbiter holding the key, or ``decryption="threshold"``: an n-of-n
threshold key among the guest and the hosts; Taylor-approximated logistic loss, or with
``link="cubic"`` and one host a least-squares cubic of the sigmoid, for winsorized features
and plain steps), run by the local runner :func:`train_paillier` (the parties are sans-I/O
objects; every message crosses as bytes and is counted).

``protocol="ss"``: secret-shared training in the shape of SecretFlow's SS-LR: each party
secret-shares its feature block (and the guest its labels) in a :class:`veil.mpc.Session`
and :class:`veil.mpc.models.LogisticRegression` / ``LinearRegression`` trains on the
shares (full-batch gradient descent with the piecewise-linear sigmoid; ``epochs`` steps
per pass as many as the mini-batch schedule would take: ``epochs * ceil(n / batch_size)``).
Each party's block of the trained weights is then revealed to that party only, the
intercept to the guest. Threat model: :mod:`veil.mpc.session` (semi-honest parties, a
trusted dealer of correlated randomness that sees no shares).

Optional differential privacy of the secret-shared logistic regression (``epsilon``,
``delta``, ``clip``, ``ledgers``): every party clips its rows to ``clip`` and every
gradient step gets discrete Gaussian noise from two parties, each party's ledger charged
the run (:mod:`veil.fl.vertical.gradient_noise`). (The Paillier protocol offers label DP
against the hosts instead: ``label_epsilon``, :mod:`veil.fl.vertical.paillier_lr`.)

Both end the same way: every party keeps its own coefficient block; a prediction sums
the parties' partial scores at the guest (hosts reveal ``X_k w_k`` for the rows to
predict, as in FATE). ``X`` is a list of the parties' aligned feature blocks, the guest's
first; ``y`` is the guest's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_array, check_choice, check_fitted
from veil.errors import ConfigError, DataError
from veil.fl.vertical.gradient_noise import GradientNoise, clip_rows
from veil.fl.vertical.paillier_lr import (
    Arbiter,
    PaillierGuest,
    PaillierHost,
    Plan,
    ThresholdDecryption,
)
from veil.random import check_rng

__all__ = ["VerticalLogisticRegression", "VerticalLinearRegression", "EpochStats",
           "train_paillier", "train_ss", "PROTOCOLS"]

log = logging.getLogger(__name__)

PROTOCOLS = ("paillier", "ss")
_DP_FRAC_BITS = 16       # the secret-shared fixed point of a private run (Session default)
DECRYPTIONS = ("arbiter", "threshold")


@dataclass
class EpochStats:
    """Per epoch: wall seconds and bytes each party sent (all messages as bytes)."""

    seconds: list[float] = field(default_factory=list)
    bytes: list[dict[str, int]] = field(default_factory=list)


def train_paillier(guest: PaillierGuest, hosts: Sequence[PaillierHost],
                   arbiter: Arbiter | ThresholdDecryption) -> EpochStats:
    """Run the Paillier protocol in this process: key, then every batch of the plan.
    ``arbiter``: the key holder, or the parties' threshold decryption; its traffic is
    reported under "arbiter" (threshold: the partial decryptions)."""
    stats = EpochStats()
    key = arbiter.key_message()
    for party in (guest, *hosts):
        party.receive_key(key)
    names = ["guest", *(h.name for h in hosts), "arbiter"]
    sent = dict.fromkeys(names, 0)
    epoch, start = 0, time.perf_counter()
    sent["arbiter"] += len(key) * (1 + len(hosts))

    def close_epoch() -> None:
        stats.seconds.append(time.perf_counter() - start)
        stats.bytes.append(dict(sent))

    while (batch := guest.next_batch()) is not None:
        now = guest._step[0]
        if now != epoch:
            close_epoch()
            epoch, start = now, time.perf_counter()
            sent = dict.fromkeys(names, 0)
        sent["guest"] += len(batch) * len(hosts)
        scores = {h.name: h.forward(batch) for h in hosts}
        for h in hosts:
            sent[h.name] += len(scores[h.name])
        residual = guest.residual(scores)
        sent["guest"] += len(residual) * len(hosts)
        for party, message in [(guest, guest.gradient()),
                               *((h, h.backward(residual)) for h in hosts)]:
            before = arbiter.traffic
            answer = arbiter.decrypt(message)
            sent[party.name] += len(message)
            sent["arbiter"] += arbiter.traffic - before
            party.update(answer)
    close_epoch()
    return stats


def train_ss(X: Sequence[np.ndarray], y: np.ndarray, task: str, *, steps: int, epochs: int,
             learning_rate: float, alpha: float, fit_intercept: bool,
             noise: GradientNoise | None = None, session_options: dict | None = None
             ) -> tuple[list[np.ndarray], float, EpochStats]:
    """Secret-shared training; returns each party's coefficient block (revealed to that
    party only), the intercept (to the guest) and the cost (the run's totals, sharing
    included, spread evenly over the ``epochs``: its steps are all alike). ``noise``: the
    charged noise of a private run (added to every gradient). ``session_options``: further
    :class:`veil.mpc.Session` options (e.g. ``runtime="process"``: each party in its own
    OS process, with ``timeout``)."""
    from veil.mpc import Session
    from veil.mpc.models import LinearRegression, LogisticRegression, share_columns

    model_cls = LogisticRegression if task == "logistic" else LinearRegression
    stats = EpochStats()
    frac = {} if noise is None else {"frac_bits": noise.frac_bits}
    with Session(parties=len(X), **frac, **(session_options or {})) as session:  # CSPRNG
        with session.measure() as m:
            shared = share_columns(session, X)
            labels = session.share(np.asarray(y, dtype=np.float64), owner=0)
            model = model_cls(learning_rate=learning_rate, max_iter=steps,
                              fit_intercept=fit_intercept, alpha=alpha
                              ).fit(shared, labels, noise=noise)
            bounds = np.cumsum([0, *(x.shape[1] for x in X)])
            coefs = [model.coef_[int(a):int(b)].reveal(to=k)
                     for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
            intercept = float(model.intercept_.reveal(to=0)) if fit_intercept else 0.0
        stats.seconds = [m.cost.seconds / epochs] * epochs
        stats.bytes = [{("guest" if k == 0 else f"host{k}"): int(s) // epochs
                        for k, s in enumerate(m.cost.sent)}] * epochs
    return coefs, intercept, stats


class _VerticalRegression:
    """The estimator shared by the two tasks (parameters as given, learned state ``_``)."""

    task = "logistic"

    def __init__(self, protocol: str = "paillier", *, epochs: int = 10, batch_size: int = 1024,
                 learning_rate: float = 0.15, alpha: float = 0.0, optimizer: str = "sgd",
                 link: str = "taylor2", fit_intercept: bool = True, key_bits: int = 2048,
                 insecure_ok: bool = False,
                 short_exponents: bool = False, decryption: str = "arbiter",
                 label_epsilon: float | None = None,
                 label_delta: float = 1e-5, ledger: Any = None, epsilon: float | None = None,
                 delta: float = 1e-5, clip: float | Sequence[float] = 1.0,
                 ledgers: Sequence[Any] | None = None, random_state: Any = None) -> None:
        self.protocol = protocol
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.alpha = alpha
        self.optimizer = optimizer
        self.link = link
        self.fit_intercept = fit_intercept
        self.key_bits = key_bits
        self.insecure_ok = insecure_ok
        self.short_exponents = short_exponents
        self.decryption = decryption
        self.label_epsilon = label_epsilon
        self.label_delta = label_delta
        self.ledger = ledger
        self.epsilon = epsilon
        self.delta = delta
        self.clip = clip
        self.ledgers = ledgers
        self.random_state = random_state

    def _blocks(self, X: Any, name: str = "X") -> list[np.ndarray]:
        if isinstance(X, np.ndarray) or not isinstance(X, Sequence) or len(X) < 2:
            raise DataError(f"{name} must be a list of the parties' feature blocks (the "
                            "guest's first, then one per host): at least two")
        blocks = [check_array(x, f"{name}[{k}]", ndim=2, allow_empty=k == 0)
                  for k, x in enumerate(X)]
        rows = {b.shape[0] for b in blocks}
        if len(rows) != 1:
            raise DataError(f"{name}: the parties' blocks have {[b.shape[0] for b in blocks]} "
                            "rows; aligned blocks have the same rows (align them first)")
        return blocks

    def fit(self, X: Sequence[Any], y: Any) -> _VerticalRegression:
        """Train on aligned blocks ``X`` (guest first) with the guest's labels ``y``."""
        protocol = check_choice(self.protocol, "protocol", PROTOCOLS)
        blocks = self._blocks(X)
        plan = Plan(task=self.task, epochs=self.epochs, batch_size=self.batch_size,
                    learning_rate=self.learning_rate, alpha=self.alpha,
                    optimizer=self.optimizer, link=self.link)
        rng = check_rng(self.random_state)
        hosts = [f"host{k}" for k in range(1, len(blocks))]
        if self.epsilon is not None and (protocol, self.task) != ("ss", "logistic"):
            raise ConfigError("epsilon (noisy gradients) is for protocol='ss' logistic "
                              f"regression; got protocol={protocol!r}, task {self.task!r} "
                              "(Paillier: label_epsilon)")
        self.clip_ = None
        if protocol == "paillier":
            guest = PaillierGuest(blocks[0], y, hosts, plan, fit_intercept=self.fit_intercept,
                                  label_epsilon=self.label_epsilon,
                                  label_delta=self.label_delta, ledger=self.ledger,
                                  insecure_ok=self.insecure_ok, rng=rng.spawn(1)[0])
            parties = [PaillierHost(h, b, plan, insecure_ok=self.insecure_ok, rng=r)
                       for h, b, r in zip(hosts, blocks[1:], rng.spawn(len(hosts)))]
            sizes = {"guest": guest.coef_.size, **{h.name: h.coef_.size for h in parties}}
            if check_choice(self.decryption, "decryption", DECRYPTIONS) == "arbiter":
                arbiter = Arbiter(sizes, key_bits=self.key_bits, insecure_ok=self.insecure_ok,
                                  short_exponents=self.short_exponents)
            else:
                arbiter = ThresholdDecryption(sizes, key_bits=self.key_bits,
                                              insecure_ok=self.insecure_ok)
            self.stats_ = train_paillier(guest, parties, arbiter)
            own = guest.coef_[:-1] if self.fit_intercept else guest.coef_
            self.coefs_ = [own, *(h.coef_ for h in parties)]
            self.intercept_ = guest.intercept_
        else:
            if self.label_epsilon is not None or plan.optimizer != "sgd" or \
                    plan.link != "taylor2":
                raise ConfigError("protocol='ss' trains by plain gradient descent with its own "
                                  "sigmoid: optimizer must be 'sgd', link 'taylor2' (unused) "
                                  "and label_epsilon None")
            y = check_array(y, "y", ndim=1)
            if y.size != blocks[0].shape[0]:
                raise DataError(f"y has {y.size} labels for {blocks[0].shape[0]} rows")
            steps = plan.epochs * math.ceil(y.size / plan.batch_size)
            noise = None
            if self.epsilon is not None:
                noise = GradientNoise([b.shape[1] for b in blocks], self.clip, steps,
                                      self.epsilon, self.delta, frac_bits=_DP_FRAC_BITS,
                                      fit_intercept=self.fit_intercept)
                blocks = noise.clip_blocks(blocks)
                noise.charge(self.ledgers or [])    # the last check: then it is spent
                self.clip_ = noise.clip
            self.coefs_, self.intercept_, self.stats_ = train_ss(
                blocks, y, self.task, steps=steps, epochs=plan.epochs,
                learning_rate=plan.learning_rate,
                alpha=plan.alpha, fit_intercept=self.fit_intercept, noise=noise)
        self.n_features_in_ = [b.shape[1] for b in blocks]
        return self

    def decision_function(self, X: Sequence[Any]) -> np.ndarray:
        """Sum of the parties' partial scores plus the intercept."""
        check_fitted(self, "coefs_")
        blocks = self._blocks(X)
        if [b.shape[1] for b in blocks] != self.n_features_in_:
            raise DataError(f"X has blocks of {[b.shape[1] for b in blocks]} columns; the "
                            f"model was fitted on {self.n_features_in_}")
        if self.clip_ is not None:      # trained on clipped rows: score clipped rows
            blocks = [clip_rows(b, c) for b, c in zip(blocks, self.clip_)]
        return sum(b @ w for b, w in zip(blocks, self.coefs_)) + self.intercept_


class VerticalLogisticRegression(_VerticalRegression):
    """Binary logistic regression on vertically partitioned data (labels 0/1 at the guest)."""

    task = "logistic"

    def predict_proba(self, X: Sequence[Any]) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Sequence[Any]) -> np.ndarray:
        return (self.decision_function(X) > 0).astype(np.int64)

    def score(self, X: Sequence[Any], y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y)))


class VerticalLinearRegression(_VerticalRegression):
    """Least-squares regression on vertically partitioned data (targets at the guest)."""

    task = "linear"

    def predict(self, X: Sequence[Any]) -> np.ndarray:
        return self.decision_function(X)

    def score(self, X: Sequence[Any], y: Any) -> float:
        """R^2."""
        y = np.asarray(y, dtype=np.float64)
        pred = self.predict(X)
        return float(1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))
