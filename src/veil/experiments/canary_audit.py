"""Canary clients: the one-run privacy audit of a real federated run.

A canary client (Andrew, Kairouz, Oh, Oprea, McMahan & Suriyakumar 2024, "One-shot empirical
privacy estimation for federated learning"; Maddock, Sablayrolles & Stock 2023, CANIFE) is a
client whose update is crafted by the auditor and whose presence the auditor then guesses
from what the server releases. With m canary clients in one run, Steinke, Nasr & Jagielski
(2023, "Privacy auditing with one (1) training run") turn the guesses into a lower bound on
epsilon (:func:`veil.audit.one_run_epsilon_lower_bound`). The semantics that bound needs:

1. **Coins before training.** :func:`add_canary_clients` draws, from ``rng``
   (``veil.random``), m unit directions u_i and m independent fair coins Z_i
   (:func:`veil.audit.make_canaries`) before the first round.
2. **The canary clients.** All m canaries join the federation as clients, with the ids after
   the real ones, and are sampled, clipped, noised, masked and charged exactly like any
   client: each wraps the client the strategy itself builds (``strategy.client``), so under
   DPFedAvg, SecAgg or both it speaks the same protocol as the real clients; only its local
   training differs (:class:`CanaryTrainer`). In round t, canary i sends
   ``(-1)^t * norm * u_i`` when Z_i = 1 and the zero update when Z_i = 0. An excluded
   canary is thus a client *without data*: its zero update leaves the sum of the updates
   exactly as if it were absent, while the client count (public) and, under DPFedAvg, the
   averaging denominator q N stay independent of the coins. The released models therefore
   depend on Z_i only through the sum of the clipped updates, so the client-level
   (epsilon, delta) the ledger certifies (add or remove one client's updates, every round)
   covers each canary. The real clients keep their data; the sampling rate, the noise
   multiplier and DPFedAvg's per-round charge do not depend on the client count (SecAgg's
   distributed noise is accounted for the clients actually in the round, canaries
   included, as for any other client).
3. **The guessing rule, fixed before training.** The auditor sees the global model after
   every round (each round's change w_{t+1} - w_t is the released aggregate, up to the
   public factor the strategy applies) and scores canary i by the signed projection

       s_i = sum_t (-1)^t <w_{t+1} - w_t, u_i>;

   the guesses are the one-run audit's: the k+ highest scores guessed in, the k- lowest
   out, with (k+, k-) given in advance or taken from the fixed grid ``"search"`` with a
   Bonferroni correction. Nothing about the guesses depends on the run.

Why the alternating sign: the real clients move the model along a smooth path towards
their optimum w*, so the plain projection <w_T - w_0, u_i> carries <w* - w_0, u_i>, of
size |w* - w_0| / sqrt(d) in a model of d parameters, which in a small model swamps a
canary's own push; and they pull a constant push back once the model has converged. The
alternating sum cancels a smooth drift (it keeps about half of the first round's), and a
push that flips every round is never pulled back: with a fraction a of the round's weight
restoring the model, the signal is 2 T norm / (2 - a) times the averaging factor, while the
DP noise's projection keeps its size relative to it (so the audit is as tight as the
Gaussian mechanism allows). The final model keeps at most one round's push.

The auditor is anyone who sees the sequence of global models (every sampled client does),
not the server's view of single updates (plain transport exposes them, secure aggregation
hides them). ``norm`` is the L2 norm of an included canary's update: set it to DPFedAvg's
clipping bound C, the largest contribution a client may make (with adaptive clipping, a
canary above the round's bound is clipped to it like any update). ``kind="dirac"`` puts
the canaries on m distinct coordinates (m <= d), so they never interfere;
``kind="gaussian"`` allows m > d at the cost of cross-talk of about sqrt(m / 2d) of a
canary's own signal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from veil._validation import check_int, check_positive
from veil.audit import Canaries, OneRunBound, make_canaries
from veil.errors import ConfigError, DataError
from veil.fl.canary import CanaryClient, CanaryTrainer, sign
from veil.random import RngLike

__all__ = ["CanaryClients", "add_canary_clients"]


class CanaryClients:
    """The canary clients of a federation and their audit: a federation observer that
    accumulates the signed sum of the released model changes, ``sum_t (-1)^t (w_{t+1} -
    w_t)`` (checkpointed with the run), from which :meth:`scores` and :meth:`audit` follow.

    Attributes: ``canaries`` (:class:`veil.audit.Canaries`: directions and coins), ``ids``
    (their client ids), ``norm``.
    """

    def __init__(self, canaries: Canaries, ids: tuple[int, ...], norm: float,
                 start: np.ndarray) -> None:
        self.canaries = canaries
        self.ids = ids
        self.norm = norm
        self._last = np.array(start, dtype=np.float64)
        self._signed = np.zeros_like(self._last)

    @property
    def included(self) -> np.ndarray:
        return self.canaries.included

    def observe(self, server_round: int, params: np.ndarray) -> None:
        """Take in the global parameters after ``server_round`` (a federation calls this)."""
        params = np.asarray(params, dtype=np.float64)
        self._signed += sign(server_round) * (params - self._last)
        self._last = params.copy()

    def state_dict(self) -> dict[str, Any]:
        return {"last": self._last.copy(), "signed": self._signed.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        last, signed = (np.asarray(state[k], dtype=np.float64) for k in ("last", "signed"))
        if last.shape != self._last.shape or signed.shape != self._last.shape:
            raise DataError(f"the saved canary state has shapes {last.shape}, {signed.shape}; "
                            f"the model has {self._last.size} parameters")
        self._last, self._signed = last, signed

    def scores(self) -> np.ndarray:
        """s_i = sum_t (-1)^t <w_{t+1} - w_t, u_i> over the rounds observed so far."""
        return self.canaries.scores(self._signed)

    def audit(self, **options: Any) -> OneRunBound:
        """The one-run epsilon lower bound (options: ``delta``, ``confidence``, ``guesses``,
        ``rng`` of :func:`veil.audit.one_run_epsilon_lower_bound`)."""
        return self.canaries.audit(self._signed, **options)


def add_canary_clients(federation: Any, m: int, *, norm: float, kind: str = "dirac",
                       n_examples: int | None = None, rng: RngLike = None) -> CanaryClients:
    """Add ``m`` canary clients to ``federation`` (a :class:`~veil.fl.Federation` before its
    first round) and register their audit as one of its observers (see the module doc).

    ``norm``: the L2 norm of an included canary's update (the clipping bound under
    DPFedAvg); ``kind``: ``"dirac"`` (m distinct coordinates, m <= the parameter count) or
    ``"gaussian"`` directions (:func:`veil.audit.make_canaries`); ``n_examples``: the example
    count a canary claims as its FedAvg weight (default: the real clients' mean, so that a
    canary weighs like a typical client); ``rng``: the coins and directions (None: secure
    randomness; a run resumed later must be given the same canaries, i.e. the same seed).

    The federation's fingerprint takes the canaries in (coins and directions included), so
    resuming a checkpoint with other canaries is refused.
    """
    m = check_int(m, "m", low=1)
    norm = check_positive(norm, "norm")
    if federation.history.rounds:
        raise ConfigError("canary clients must join before the first round: their coins "
                          "are drawn before training")
    trainers = [getattr(c, "trainer", None) for c in federation.clients.values()]
    if any(not hasattr(t, "n_examples") for t in trainers):
        raise ConfigError("canary clients need clients that train locally and send updates "
                          "(FedAvg, FedProx, DPFedAvg, SecAgg); this strategy's do not")
    if n_examples is None:
        n_examples = max(1, round(float(np.mean([t.n_examples for t in trainers]))))
    start = federation.params.copy()
    if kind == "dirac" and m > start.size:
        raise ConfigError(f"m={m} Dirac canaries need m distinct coordinates; the model has "
                          f"{start.size} parameters: use fewer canaries or kind='gaussian'")
    canaries = make_canaries(m, start.size, kind=kind, rng=rng)
    first = max(federation.clients) + 1
    ids = tuple(range(first, first + m))
    for i, cid in enumerate(ids):
        update = canaries.update(i, norm) if canaries.included[i] else np.zeros(start.size)
        trainer = CanaryTrainer(federation.model, update, n_examples)
        federation.clients[cid] = CanaryClient(cid, federation.strategy, trainer)
    h = hashlib.sha256(f"{federation.fingerprint}|canaries:{kind}:{norm!r}:{n_examples}|"
                       .encode())
    h.update(canaries.included.tobytes())
    h.update(np.ascontiguousarray(canaries.directions if canaries.coordinates is None
                                  else canaries.coordinates).tobytes())
    federation.fingerprint = h.hexdigest()[:32]
    audit = CanaryClients(canaries, ids, norm, start)
    federation.observers.append(audit)
    return audit
