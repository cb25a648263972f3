"""Registered release paths of :mod:`veil.fl`: DP-FedAvg (central, local, distributed inside
SecAgg), the hybrid approach (gradient queries and the federated strategy), vertical SS-LR
gradient noise and Paillier label noise, split learning (label DP, RRWithPrior, embedding
noise) and transfer by distillation.

Federated cases are small (a few clients, one round); their fast tier has few trials, so it
checks the structure and catches gross violations only (``--deep`` runs more). The
adversarial neighbour of a federation is a client whose data drive its update to the clip
norm; of a label path, an extreme label; of split learning, a row at the clip bound, and a
top that asks for the same row in every batch of a pass.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from dp_accounting import dp_event as de

from veil.audit.conformance.registry import (
    ADD_REMOVE,
    ADD_REMOVE_CLIENT,
    REPLACE,
    REPLACE_CLIENT,
    Pair,
    register,
)
from veil.dp import Ledger, PrivacyBudget
from veil.dp.accounting import make_accountant
from veil.dp.trust import Trust

EPS, DELTA = 1.0, 1e-5


def _certified(event: de.DpEvent, delta: float = DELTA) -> float:
    """The epsilon a non-adaptive PLD accountant certifies for ``event`` at ``delta``."""
    acc = make_accountant("pld")
    acc.compose(event)
    return acc.get_epsilon(delta)


# -- horizontal federations ---------------------------------------------------------------
def _client(seed: int, rows: int = 12, extreme: bool = False):
    gen = np.random.default_rng(seed)
    X = gen.uniform(-1, 1, size=(rows, 3))
    y = (X[:, 0] > 0).astype(int)
    y[:2] = [0, 1]
    if extreme:   # its update sits at the clip norm, pointing one way
        X, y = np.full((rows, 3), 50.0), np.ones(rows, dtype=int)
        y[0] = 0
    return X, y


_CLIENTS = [_client(s) for s in range(3)]


def _add_client():
    return [Pair("one extreme client added", _CLIENTS, [*_CLIENTS, _client(9, extreme=True)])]


def _replace_client():
    return [Pair("one client's data replaced by extreme data", _CLIENTS,
                 [*_CLIENTS[:2], _client(9, extreme=True)])]


def _params(history) -> float:
    return float(np.sum(history.params))


def _param_shape(history):
    return np.shape(history.params)


@functools.cache
def _multiplier(noise: str) -> float:
    """The noise multiplier DPFedAvg.from_budget calibrates for one round at (EPS, DELTA)."""
    from veil.fl.strategies import DPFedAvg, FedAvg

    return DPFedAvg.from_budget(FedAvg(), PrivacyBudget(EPS, DELTA), rounds=1, clip_norm=1.0,
                                noise=noise).noise_multiplier


def _federation(noise: str):
    def run(clients, rng):
        from veil.fl import Federation
        from veil.fl.strategies import DPFedAvg, FedAvg
        from veil.learn import LogisticRegression

        strategy = DPFedAvg(FedAvg(), noise_multiplier=_multiplier(noise), clip_norm=1.0,
                            noise=noise)
        return Federation(clients, LogisticRegression(), strategy, 1, classes=[0, 1],
                          ledger=Ledger(EPS, DELTA)).run()
    return run


register("fl.DPFedAvg central", relation=ADD_REMOVE_CLIENT, epsilon=EPS, delta=DELTA,
         pairs=_add_client, reduce=_params, structure=_param_shape, trials=10,
         covers=("veil.fl.party_ledger:RoundLedger.check",
                 "veil.fl.party_ledger:RoundLedger.pay"))(_federation("central"))
# local DP: what the server sees of one client, whatever that client holds (#28 item 3
# certifies it for replace-one on branch flfixes; few trials cannot see the factor 2)
register("fl.DPFedAvg local", relation=REPLACE_CLIENT, epsilon=EPS, delta=DELTA,
         pairs=_replace_client, reduce=_params, structure=_param_shape, trials=10)(
    _federation("local"))


@register("fl.SecAgg + DPFedAvg distributed", relation=ADD_REMOVE_CLIENT, epsilon=EPS,
          delta=DELTA, pairs=_add_client, reduce=_params, structure=_param_shape, trials=6,
          covers=("veil.fl.secagg.protocol:SecAggClient._on_masked_input",))
def _secagg(clients, rng):
    from veil.fl import Federation
    from veil.fl.strategies import DPFedAvg, FedAvg, SecAgg
    from veil.learn import LogisticRegression

    inner = DPFedAvg(FedAvg(), noise_multiplier=_multiplier("distributed"), clip_norm=1.0,
                     noise="distributed")
    return Federation(clients, LogisticRegression(), SecAgg(inner, bits=32), 1,
                      classes=[0, 1], ledger=Ledger(EPS, DELTA)).run()


# -- hybrid ------------------------------------------------------------------------------
def _query_parties(extra: bool):
    gen = np.random.default_rng(0)
    parts = []
    for _ in range(3):
        X = gen.uniform(-1, 1, size=(20, 3))
        parts.append((X, (X[:, 0] > 0).astype(int)))
    if extra:   # one record far outside the clip norm, with the rarer label
        X, y = parts[0]
        parts[0] = (np.vstack([X, np.full((1, 3), 40.0)]), np.append(y, 1))
    return parts


@register("fl.hybrid fit_queries", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
          pairs=lambda: [Pair("one record at the clip norm added", _query_parties(False),
                              _query_parties(True))],
          reduce=lambda fit: float(np.sum(fit.model.get_params_vector())),
          structure=lambda fit: np.shape(fit.model.get_params_vector()), trials=20,
          covers=("veil.fl.hybrid.fit:fit_queries",))
def _fit_queries(parties, rng):
    from veil.fl.hybrid.fit import SimulatedAggregator, fit_queries
    from veil.learn import LogisticRegression
    from veil.learn.private import GradientQueries

    model = LogisticRegression(alpha=0.0).initialize(3, [0, 1])
    return fit_queries(GradientQueries(model, rounds=2), SimulatedAggregator(parties),
                       method="hybrid", trust=Trust(len(parties), 2),
                       budget=PrivacyBudget(EPS, DELTA), rng=rng)


@functools.lru_cache(maxsize=1)
def _hybrid_primes():
    from veil.crypto import threshold

    return threshold.generate_safe_primes(512, insecure_ok=True, rng=51)


@register("fl.Hybrid federation", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
          pairs=lambda: [Pair("one record at the clip norm added", _query_parties(False),
                              _query_parties(True))],
          reduce=_params, structure=_param_shape, trials=3,
          covers=("veil.fl.hybrid.protocol:HybridClient._charge",))
def _hybrid(parties, rng):
    from veil.fl import Federation
    from veil.fl.strategies import Hybrid
    from veil.learn import LogisticRegression

    budget = PrivacyBudget(EPS, DELTA)
    strategy = Hybrid(Trust(3, 3), rounds=1, budget=budget, key_bits=512,
                      primes=_hybrid_primes(), insecure_ok=True)
    return Federation(parties, LogisticRegression(alpha=0.0), strategy, 1, classes=[0, 1],
                      ledger=Ledger.for_budget(budget)).run()


# -- vertical ----------------------------------------------------------------------------
def _vertical(extreme: bool):
    gen = np.random.default_rng(1)
    a, b = gen.uniform(-1, 1, size=(16, 2)), gen.uniform(-1, 1, size=(16, 2))
    y = (a[:, 0] + b[:, 0] > 0).astype(np.float64)
    if extreme:   # one row's features at the clip norm on both sides, its label flipped
        a, b, y = a.copy(), b.copy(), y.copy()
        a[0], b[0], y[0] = 10.0, -10.0, 1.0 - y[0]
    return [a, b], y


_VERTICAL_PAIRS = lambda: [Pair("one row replaced by an extreme row",  # noqa: E731
                                _vertical(False), _vertical(True))]


@register("fl.vertical SS-LR gradient noise", relation=REPLACE, epsilon=EPS, delta=DELTA,
          pairs=_VERTICAL_PAIRS, reduce=lambda m: float(np.concatenate(m.coefs_)[0]),
          structure=lambda m: [np.shape(c) for c in m.coefs_], trials=8,
          covers=("veil.fl.vertical.linear:_VerticalRegression.fit",
                  "veil.fl.vertical.gradient_noise:GradientNoise.charge"))
def _ss_lr(data, rng):
    from veil.fl.vertical import VerticalLogisticRegression

    blocks, y = data
    return VerticalLogisticRegression("ss", epochs=1, batch_size=len(y), learning_rate=1.0,
                                      epsilon=EPS, delta=DELTA, clip=1.0,
                                      ledgers=[Ledger(EPS, DELTA), Ledger(EPS, DELTA)]
                                      ).fit(blocks, y)


@register("fl.vertical Paillier LR label noise", relation=REPLACE, epsilon=EPS, delta=DELTA,
          pairs=_VERTICAL_PAIRS, reduce=lambda m: float(np.concatenate(m.coefs_)[0]),
          structure=lambda m: [np.shape(c) for c in m.coefs_], trials=3,
          covers=("veil.fl.vertical.paillier_lr:PaillierGuest.next_batch",))
def _paillier_lr(data, rng):
    from veil.fl.vertical import VerticalLogisticRegression

    blocks, y = data
    return VerticalLogisticRegression("paillier", epochs=1, batch_size=len(y), key_bits=512,
                                      insecure_ok=True, label_epsilon=EPS, label_delta=DELTA,
                                      ledger=Ledger(EPS, DELTA)).fit(blocks, y)


# -- labels ------------------------------------------------------------------------------
_LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1])


def _label_pairs():
    flipped = _LABELS.copy()
    flipped[-1] = 2 if _LABELS[-1] != 2 else 0
    return [Pair("one label replaced", _LABELS, flipped)]


@register("fl.vertical label randomized response", relation=REPLACE, epsilon=EPS,
          pairs=_label_pairs, reduce=lambda out: float(out[-1] == _LABELS[-1]),
          threshold=0.5, structure=np.shape, trials=300,
          covers=("veil.fl.vertical.label_dp:randomize_labels",))
def _randomize_labels(y, rng):
    from veil.fl.vertical.label_dp import randomize_labels

    return randomize_labels(y, 3, EPS, Ledger(EPS), rng=rng)


def _net(d: int, k: int):
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(d, k)


@register("fl.split labels (RRWithPrior)", relation=REPLACE, epsilon=EPS,
          pairs=_label_pairs, trials=40, needs=("torch",),
          reduce=lambda top: float(top._y[-1] == _LABELS[-1])
          if (len(_LABELS) - 1) in top._rows_of_stage[0] else -1.0,
          structure=lambda top: np.shape(top._y),
          covers=("veil.fl.vertical.split:SplitTop.__init__",))
def _rr_prior(y, rng):
    from veil.fl.vertical.split import SplitTop

    return SplitTop(y, ["bottom"], _net(4, 3), classes=3, epochs=2, label_epsilon=EPS,
                    label_prior=True, ledger=Ledger(EPS), rng=0, noise_rng=rng)


# -- split learning embeddings -----------------------------------------------------------
_Z = 8.0   # noise multiplier of a pass: Gaussian sigma = _Z * clip for a shift of 2 * clip


def _rows(extreme: bool):
    X = np.zeros((4, 2))
    X[0] = [1.0, 0.0] if extreme else [-1.0, 0.0]   # the row at +clip or -clip
    return X


def _embedding_pairs():
    return [Pair("one row replaced, at the clip bound", _rows(False), _rows(True))]


def _bottom(X, rng):
    import torch

    from veil.fl.vertical.split import SplitBottom

    module = torch.nn.Identity()
    return SplitBottom("b", X, module, train=False, clip=1.0, noise_multiplier=_Z,
                       ledger=Ledger(100.0, DELTA), passes=1, rng=rng)


def _embed(bottom, rows, batch: int) -> np.ndarray:
    from veil.fl.messages import decode, encode

    msg = encode({"stage": "batch", "pass": "train", "epoch": 0, "batch": batch,
                  "rows": np.asarray(rows, dtype=np.int64)})
    return decode(bottom.forward(msg))["h"]


@register("fl.split embedding noise", relation=REPLACE,
          epsilon=_certified(de.GaussianDpEvent(_Z / 2.0)), delta=DELTA,
          pairs=_embedding_pairs, reduce=lambda h: float(h[0, 0]), structure=np.shape,
          trials=200, needs=("torch",),
          covers=("veil.fl.vertical.split:SplitBottom.forward",))
def _split_pass(X, rng):
    return _embed(_bottom(X, rng), np.arange(4), 0)


@register("fl.split embedding noise, a top repeating one row", relation=REPLACE,
          epsilon=_certified(de.GaussianDpEvent(_Z / 2.0)), delta=DELTA,
          pairs=lambda: [Pair("one row replaced; the top asks for it in 64 batches",
                              _rows(False), _rows(True))],
          reduce=lambda h: float(np.mean(h)), threshold=1.0, structure=np.shape, trials=200,
          needs=("torch",))
def _split_repeat(X, rng):
    """A malicious top: one pass, but row 0 in every batch; the mean of 64 copies would have
    noise sigma / 8, so "mean >= 1" (the clip bound: threshold fixed in advance) would tell
    the replaced row's sign. The bottom serves a row once per pass: the top gets the copies
    served before the refusal (one)."""
    from veil.errors import ProtocolError

    bottom, copies = _bottom(X, rng), []
    for batch in range(64):
        try:
            copies.append(_embed(bottom, [0], batch)[0, 0])
        except ProtocolError:
            break
    return np.array(copies)


# -- transfer by distillation ------------------------------------------------------------
_T_SIGMA = 8.0
_T_X = np.random.default_rng(3).uniform(-1, 1, size=(20, 2))
_T_Y = (_T_X[:, 0] > 0).astype(np.int64)


def _transfer_pairs():
    near = (np.vstack([_T_X, [[1.0, 1.0]]]), np.append(_T_Y, 1))
    # against the pattern; a label outside the declared classes is refused at the owner
    flipped = (np.vstack([_T_X, [[1.0, 1.0]]]), np.append(_T_Y, 0))
    return [Pair("one record added", (_T_X, _T_Y), near),
            Pair("one record with a flipped label added at the bound", (_T_X, _T_Y), flipped)]


@register("fl.transfer distillation (noisy votes)", relation=ADD_REMOVE,
          epsilon=_certified(de.SelfComposedDpEvent(de.GaussianDpEvent(_T_SIGMA / math.sqrt(2)),
                                                    2)),
          delta=DELTA, pairs=_transfer_pairs, reduce=lambda q: float(q[0, 0]),
          structure=np.shape, trials=10, needs=("torch",),
          covers=("veil.fl.vertical.transfer:SourceParty.answer",))
def _transfer(data, rng):
    from veil.fl.messages import decode, encode
    from veil.fl.vertical.transfer import SourceParty

    X, y = data
    source = SourceParty(X, y, _net, classes=2, teachers=2, epochs=1, noise_multiplier=_T_SIGMA,
                         ledger=Ledger(100.0, DELTA), max_queries=2, rng=rng, noise_rng=rng)
    query = encode({"stage": "query", "X": np.array([[0.5, 0.5], [-0.5, 0.5]], np.float32)})
    return decode(source.answer(query))["q"]
