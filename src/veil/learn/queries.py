"""Learners expressed as aggregate queries, and how a query is answered across parties.

The hybrid approach (Truex et al., AISec 2019) trains a model ``f_M`` through a sequence of
aggregate queries ``Q_1 .. Q_k``: the learner asks for a vector, every party computes its
answer ``Q_s(D_i)`` from its own records, the answers are summed (under encryption, with
noise), and the learner updates the model from the noisy sum. Here:

* :class:`Query` -- what the learner asks: a ``spec`` the parties compute from (numbers,
  text, arrays: it travels in a message) and a :class:`QueryShape`: the answer's length,
  its L1/L2 sensitivity (the most one record, added or removed, changes the *sum*), the
  bound every party's answer coordinate must respect, and how it is put on an integer grid.
* :class:`QueryLearner` -- ``plan()`` (the shapes of the queries it will ask, so the noise
  can be calibrated for the whole run), ``next_query()``, ``answer(query, X, y)`` (run by
  each party on its own data) and ``update(query, aggregate)``. Learners:
  :class:`GradientQueries` here (logistic regression, linear SVM, a torch network: noisy
  sums of clipped per-example gradients and a record count), and the ID3 tree of
  :mod:`veil.learn.tree` (count queries).
* The **integer grid** (:func:`contribute`): every answer leaves its party as integers,
  which is what Paillier encrypts and what integer noise needs. A party clips its answer
  into ``[-bound, bound]`` (clip counted, never silent; clipping is 1-Lipschitz per
  coordinate, so the sensitivity is unchanged) and rounds ``answer * 2^b`` to integers
  (b = :func:`grid_bits`). Integer noise (Skellam) is added after rounding, so its
  sensitivity is that of the rounded answer: ``2^b S_2 + sqrt(d)`` in L2 and
  ``min(2^b S_1 + d, S_2'^2)`` in L1 for real answers (each rounding moves a coordinate by
  at most 1/2, twice), exactly ``2^b S`` for integer answers (:meth:`QueryShape.grid_sensitivity`).
  Real noise (Gaussian, Laplace) is added before rounding, as in the paper.
* **Methods** (:data:`METHODS`), all under this one API: ``none`` (exact answers summed in
  the clear: plain FedAvg-style aggregation), ``smc`` (summed under encryption, no
  noise), ``central`` (a trusted aggregator adds all the noise once), ``local`` (each party
  adds the full noise: t = 1) and ``hybrid`` (each adds the share for t honest parties).
  Every noisy query is charged to a :class:`~veil.dp.Ledger`, before any noise is drawn,
  as the central-DP cost of the noise of t honest parties (:mod:`veil.dp.distributed`).
* :class:`SimulatedAggregator` -- the parties in this process, the same integer arithmetic
  as the encrypted protocol (:mod:`veil.fl.hybrid_protocol`) without the encryption, which
  changes nothing in the sum: the noise-only simulation of the accuracy experiments.
* :func:`fit_queries` runs a learner against an aggregator with a method and a budget.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_array, check_choice, check_int, check_positive
from veil.crypto.encoding import FixedPoint
from veil.dp.distributed import (
    NOISES,
    DistributedMechanism,
    calibrate_multiplier,
    check_trust,
    distributed_noise,
)
from veil.dp.ledger import Ledger
from veil.dp.sensitivity import clip_l2, clip_values
from veil.errors import ConfigError, DataError
from veil.learn.base import GradientClassifier
from veil.learn.torch_model import TorchModel
from veil.random import Generator, check_rng

__all__ = ["QueryShape", "Query", "QueryAnswer", "QueryLearner", "Aggregator", "Method",
           "METHODS", "SimulatedAggregator", "GradientQueries", "QueryFit", "fit_queries",
           "plan_multiplier", "noise_std", "grid_bits", "contribute", "query_noise",
           "value_limit", "decode"]

#: fractional bits of the grid that real-valued noise is rounded to (answers and noise)
FLOAT_NOISE_BITS = 16
#: a party's noise share exceeds the encoding's headroom with probability <= 2^-TAIL_BITS
TAIL_BITS = 64


@dataclass(frozen=True)
class QueryShape:
    """What is known about a query before the data is seen.

    ``size``: length of the answer (may be 0 in a :meth:`QueryLearner.plan` when unknown
    and ``integer`` is True: integer answers do not need it). ``l1``/``l2``: sensitivity of
    the sum over all parties' answers when one record is added or removed. ``bound``: the
    largest ``|coordinate|`` of one party's answer (larger ones are clipped and counted).
    ``integer``: answers are exact integers (counts). ``frac_bits``: fractional bits of the
    integer grid for real answers (0 for integer answers).
    """

    size: int
    l1: float
    l2: float
    bound: float
    integer: bool = False
    frac_bits: int = 0

    def __post_init__(self) -> None:
        check_int(self.size, "size", low=0)
        check_positive(self.l1, "l1")
        check_positive(self.l2, "l2")
        check_positive(self.bound, "bound")
        check_int(self.frac_bits, "frac_bits", low=0, high=40)
        if self.integer and self.frac_bits:
            raise ConfigError(f"frac_bits={self.frac_bits} is not allowed for integer answers")

    def grid_sensitivity(self, bits: int) -> tuple[float, float]:
        """(L1, L2) sensitivity of the sum of answers on the grid of ``bits`` fractional bits
        (module docstring)."""
        scale = 2.0 ** bits
        if self.integer:
            return scale * self.l1, scale * self.l2
        if self.size == 0:
            raise ConfigError("a real-valued query needs its size to bound its rounding")
        l2 = scale * self.l2 + math.sqrt(self.size)
        return min(scale * self.l1 + self.size, l2 * l2), l2


@dataclass(frozen=True)
class Query:
    """One aggregate query: its name (for the ledger), shape and the parties' ``spec``."""

    name: str
    shape: QueryShape
    spec: Mapping[str, Any] = field(default_factory=dict)


def _checked_values(query: Query, aggregate: QueryAnswer) -> np.ndarray:
    values = check_array(aggregate.values, "aggregate.values", ndim=1, allow_empty=True)
    if values.size != query.shape.size:
        raise DataError(f"the aggregate has {values.size} values; query {query.name!r} "
                        f"expects {query.shape.size}")
    return values


@dataclass(frozen=True)
class QueryAnswer:
    """The answer to a query: the noisy sum (decoded), the standard deviation of its noise
    per coordinate, how many values were clipped, who contributed, and transport metrics."""

    values: np.ndarray
    noise_std: float = 0.0
    clipped: int = 0
    parties: tuple[int, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)


class QueryLearner(ABC):
    """A learning algorithm as a sequence of aggregate queries (module docstring)."""

    @abstractmethod
    def plan(self) -> list[QueryShape]:
        """The shapes of the queries the learner may ask, in order (for calibration)."""

    @abstractmethod
    def next_query(self) -> Query | None:
        """The next query, or None when the model is complete."""

    @abstractmethod
    def answer(self, query: Query, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
        """Run by a party: its exact answer to ``query`` and how many records were clipped."""

    @abstractmethod
    def update(self, query: Query, aggregate: QueryAnswer) -> None:
        """Update the model from the (noisy) aggregate answer."""

    @property
    @abstractmethod
    def model(self) -> Any:
        """The model learned so far (a scikit-learn style estimator)."""


# -- the integer grid ------------------------------------------------------------------
def grid_bits(shape: QueryShape, noise: DistributedMechanism | None) -> int:
    """Fractional bits of the grid a party's answer (and noise) is sent on."""
    if noise is None or noise.integer:
        return shape.frac_bits
    return max(shape.frac_bits, FLOAT_NOISE_BITS)


def value_limit(shape: QueryShape, noise: DistributedMechanism | None, *,
                noisy: bool = True) -> int:
    """The largest ``|integer|`` one party sends on the grid of ``noise``: its bound, plus
    (``noisy``) its share's 2^-64 tail."""
    bits = grid_bits(shape, noise)
    limit = math.ceil(shape.bound * 2.0 ** bits) + 1
    if noise is not None and noisy:
        tail = noise.tail_bound(TAIL_BITS)
        limit += math.ceil(tail if noise.integer else tail * 2.0 ** bits)
    return limit


def query_noise(kind: str, noise_multiplier: float, shape: QueryShape, *, parties: int,
                honest: int, delta: float) -> DistributedMechanism:
    """The distributed mechanism of ``kind`` for a query: integer noise (Skellam) on the
    grid's sensitivities, real noise on the query's own."""
    if NOISES[check_choice(kind, "noise", tuple(NOISES))].integer:
        l1, l2 = shape.grid_sensitivity(shape.frac_bits)
    else:
        l1, l2 = shape.l1, shape.l2
    return distributed_noise(kind, noise_multiplier, l1_sensitivity=l1, l2_sensitivity=l2,
                             parties=parties, honest=honest, delta=delta)


def contribute(shape: QueryShape, answer: Any, noise: DistributedMechanism | None,
               rng: Any = None, *, noisy: bool = True) -> tuple[np.ndarray, int]:
    """One party's integers for the sum, and how many values were clipped.

    The answer is clipped into ``[-bound, bound]`` and put on the grid of the query's
    ``noise`` mechanism (:class:`veil.crypto.encoding.FixedPoint` with :func:`grid_bits`
    fractional bits) with (``noisy``) this party's share of the noise: real noise before
    the rounding, integer noise after it (module docstring). A party that adds no share
    (central DP) still uses the grid. Any value beyond :func:`value_limit` (probability
    <= 2^-64 per coordinate, from the noise's tail) is clipped and counted too.
    """
    a = check_array(answer, "answer", ndim=1, allow_empty=True)
    if a.size != shape.size:
        raise DataError(f"answer has {a.size} values; the query expects {shape.size}")
    a, clipped = clip_values(a, (-shape.bound, shape.bound), name="answer") if a.size else (a, 0)
    bits = grid_bits(shape, noise)
    limit = value_limit(shape, noise, noisy=noisy)
    grid = FixedPoint(frac_bits=bits, int_bits=max(0, (limit >> bits).bit_length() + 1))
    share = noise.share(a.size, rng) if noise is not None and noisy else None
    if share is not None and not noise.integer:
        a = a + share
    cap = math.ldexp(limit, -bits)
    over = int(np.count_nonzero(np.abs(a) > cap))
    q = grid.encode(np.clip(a, -cap, cap))
    if share is not None and noise.integer:
        q = q + share
        over += int(np.count_nonzero(np.abs(q) > limit))
        q = np.clip(q, -limit, limit)
    return q.astype(np.int64), clipped + over


def decode(total: Any, shape: QueryShape, noise: DistributedMechanism | None) -> np.ndarray:
    """The real sum from the integer sum of the contributions."""
    return np.asarray(total, dtype=object).astype(np.float64) * 2.0 ** -grid_bits(shape, noise)


def noise_std(shape: QueryShape, mechanism: DistributedMechanism | None,
              copies: int) -> float:
    """Standard deviation, in the answer's units, of ``copies`` shares of ``mechanism``'s
    noise per coordinate (integer noise is on the grid of ``2^frac_bits``)."""
    if mechanism is None or copies == 0:
        return 0.0
    scale = 2.0 ** -grid_bits(shape, mechanism) if mechanism.integer else 1.0
    return math.sqrt(copies * mechanism.share_variance) * scale


# -- where the noise goes ----------------------------------------------------------------
@dataclass(frozen=True)
class Method:
    """A way to answer queries: ``encrypted`` sums, and who adds the noise (``None``: no
    noise, ``"server"``: the aggregator once, ``"parties"``: each party its share)."""

    name: str
    encrypted: bool
    noise: str | None

    def noise_parties(self, trust: int | None, parties: int) -> tuple[int, int]:
        """(how many add noise, t: how many honest of them must suffice): (n, 1) for local
        DP, (n, t) for the hybrid, (1, 1) for central DP (the aggregator alone)."""
        if self.name == "local":
            return parties, 1
        if self.name != "hybrid":
            return 1, 1
        if trust is None:
            raise ConfigError("trust=None is not allowed with method='hybrid': give t, the "
                              f"minimum number of honest parties, in 1..{parties}")
        return parties, check_trust(trust, parties)[0]


#: the hybrid approach and its baselines (module docstring)
METHODS: dict[str, Method] = {m.name: m for m in (
    Method("none", False, None), Method("smc", True, None), Method("central", False, "server"),
    Method("local", False, "parties"), Method("hybrid", True, "parties"))}


class Aggregator(ABC):
    """Answers a query over the parties' data: the sum of their contributions."""

    #: number of parties
    parties: int

    @abstractmethod
    def aggregate(self, query: Query, learner: QueryLearner, *,
                  party_noise: DistributedMechanism | None,
                  server_noise: DistributedMechanism | None, rng: Generator) -> QueryAnswer:
        """Each party contributes (:func:`contribute`, with a share of ``party_noise``), the
        aggregator adds one draw of ``server_noise`` if given (at most one of the two is
        given; it sets the grid), and the sum is decoded."""


class SimulatedAggregator(Aggregator):
    """The parties' contributions summed in this process, without encryption.

    The integers are exactly those the encrypted protocol sums, and a sum of ciphertexts
    decrypts to the sum of their plaintexts, so results have the protocol's distribution
    (tested against the real protocol in ``tests/fl/test_hybrid_protocol.py``).
    """

    def __init__(self, parties: Sequence[tuple[Any, Any]]) -> None:
        if not parties:
            raise DataError("parties is empty; expected one (X, y) pair per party")
        self.data = []
        for i, pair in enumerate(parties):
            try:
                X, y = pair
            except (TypeError, ValueError):
                raise DataError(f"parties[{i}] is not an (X, y) pair") from None
            X = np.asarray(X)
            y = np.asarray(y)
            if X.ndim != 2 or y.shape != (X.shape[0],):
                raise DataError(f"parties[{i}] has X of shape {X.shape} and y of shape "
                                f"{y.shape}; expected (n, d) and (n,)")
            self.data.append((X, y))
        self.parties = len(self.data)

    def aggregate(self, query: Query, learner: QueryLearner, *,
                  party_noise: DistributedMechanism | None,
                  server_noise: DistributedMechanism | None, rng: Generator) -> QueryAnswer:
        streams = check_rng(rng).spawn(self.parties + 1)
        total = np.zeros(query.shape.size, dtype=object)   # exact integer sums
        clipped = 0
        noise = party_noise or server_noise   # the query's grid
        for (X, y), stream in zip(self.data, streams):
            answer, n_clipped = learner.answer(query, X, y)
            ints, over = contribute(query.shape, answer, noise, stream,
                                    noisy=party_noise is not None)
            total += ints.astype(object)
            clipped += n_clipped + over
        if server_noise is not None:
            ints, _ = contribute(query.shape, np.zeros(query.shape.size), server_noise,
                                 streams[-1])
            total += ints.astype(object)
        std = math.hypot(noise_std(query.shape, party_noise, self.parties),
                         noise_std(query.shape, server_noise, 1))
        return QueryAnswer(decode(total, query.shape, noise), std, clipped,
                           tuple(range(self.parties)))


# -- running a learner -------------------------------------------------------------------
@dataclass
class QueryFit:
    """The outcome of :func:`fit_queries`."""

    model: Any
    ledger: Ledger | None
    noise_multiplier: float | None
    queries: int = 0
    clipped: int = 0
    answers: list[QueryAnswer] = field(default_factory=list)


def fit_queries(learner: QueryLearner, aggregator: Aggregator, *, method: str = "hybrid",
                trust: int | None = None, noise: str = "skellam", epsilon: float | None = None,
                delta: float = 1e-6, ledger: Ledger | None = None,
                noise_multiplier: float | None = None, rng: Any = None) -> QueryFit:
    """Train ``learner`` through ``aggregator`` with ``method`` (:data:`METHODS`).

    For a noisy method the noise multiplier is calibrated so that all the queries of
    ``learner.plan()`` fit (epsilon, delta) under the ledger's accountant
    (:func:`veil.dp.distributed.calibrate_multiplier`), and each query is charged to
    ``ledger`` (default: a new ``Ledger(epsilon, delta)``) before its noise is drawn.
    ``trust``: t, the minimum number of honest parties (``method="hybrid"`` only).
    ``noise_multiplier``: skip the calibration (e.g. reuse one across methods); the ledger
    still refuses any query that does not fit.
    """
    m = METHODS[check_choice(method, "method", tuple(METHODS))]
    check_choice(noise, "noise", tuple(NOISES))
    adders, honest = m.noise_parties(trust, aggregator.parties)
    rng = check_rng(rng)
    z = None
    if m.noise is not None:
        if epsilon is None:
            if ledger is None:
                raise ConfigError(f"method={method!r} adds noise: give epsilon (and delta) "
                                  "or a ledger to charge")
            epsilon, delta = ledger.remaining()
        if ledger is None:
            ledger = Ledger(epsilon, delta)
        z = noise_multiplier if noise_multiplier is not None else plan_multiplier(
            learner, noise, epsilon, delta, accountant=ledger.accountant)
    fit = QueryFit(learner.model, ledger, z)
    while (query := learner.next_query()) is not None:
        party_noise = server_noise = None
        if z is not None:
            mech = query_noise(noise, z, query.shape, parties=adders, honest=honest,
                               delta=delta)
            ledger.charge(mech.event, label=f"{method} {query.name}", delta=mech.delta or None)
            party_noise, server_noise = (mech, None) if m.noise == "parties" else (None, mech)
        agg = aggregator.aggregate(query, learner, party_noise=party_noise,
                                   server_noise=server_noise, rng=rng)
        learner.update(query, agg)
        fit.queries += 1
        fit.clipped += agg.clipped
        fit.answers.append(agg)
    fit.model = learner.model
    return fit


def plan_multiplier(learner: QueryLearner, noise: str, epsilon: float, delta: float, *,
                    accountant: str = "pld") -> float:
    """The noise multiplier for which all of ``learner.plan()`` fits (epsilon, delta)
    (Laplace noise is pure: delta is not used)."""
    kind = NOISES[check_choice(noise, "noise", tuple(NOISES))]
    sens = [s.grid_sensitivity(s.frac_bits) if kind.integer else (s.l1, s.l2)
            for s in learner.plan()]
    return calibrate_multiplier(noise, epsilon, 0.0 if noise == "laplace" else delta, sens,
                                accountant=accountant)


# -- gradient-based models -----------------------------------------------------------------
GRADIENT_BITS = 16


class GradientQueries(QueryLearner):
    """Full-batch gradient descent on a veil.learn model from noisy gradient sums.

    Round r asks every party for ``sum_i [clip(g_i), c]`` over its records: the per-example
    gradients at the current parameters clipped to L2 norm C (numpy models:
    :func:`veil.dp.sensitivity.clip_l2` on ``per_example_gradients``; torch models:
    :func:`veil.learn.dpsgd.clipped_grad_sum`), and ``c = count_weight * C`` per record, a
    record count. One record moves the sum by at most ``C sqrt(1 + count_weight^2)`` in L2.
    The learner divides the gradient sum by the mean of the noisy counts so far (the count
    is the same every round, so averaging is post-processing) and steps
    ``w <- w - learning_rate (g / N + alpha M w)`` (the penalty is data-free).

    ``model`` must be initialized (``model.initialize(n_features, classes)``: the schema is
    public). ``max_records`` bounds one party's record count, hence its answer.
    """

    def __init__(self, model: Any, *, rounds: int = 30, learning_rate: float = 1.0,
                 clip_norm: float = 1.0, count_weight: float = 0.25,
                 max_records: int = 2 ** 20) -> None:
        if not isinstance(model, GradientClassifier) or not hasattr(model, "classes_"):
            raise ConfigError(f"model={model!r} is not allowed: expected an initialized "
                              "veil.learn model (call model.initialize(n_features, classes))")
        self._model = model
        self.rounds = check_int(rounds, "rounds", low=1)
        self.learning_rate = check_positive(learning_rate, "learning_rate")
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.count_weight = check_positive(count_weight, "count_weight")
        self.max_records = check_int(max_records, "max_records", low=1)
        self.params = model.get_params_vector()
        self.round = 0
        self.counts: list[float] = []
        p, c = self.params.size, self.clip_norm
        self.shape = QueryShape(
            size=p + 1, l1=c * (math.sqrt(p) + self.count_weight),
            l2=c * math.hypot(1.0, self.count_weight), bound=self.max_records * c,
            frac_bits=max(0, GRADIENT_BITS - math.ceil(math.log2(c))))

    @property
    def model(self) -> Any:
        return self._model.set_params_vector(self.params)

    def plan(self) -> list[QueryShape]:
        return [self.shape] * self.rounds

    def next_query(self) -> Query | None:
        if self.round >= self.rounds:
            return None
        return Query(f"gradient round {self.round}", self.shape, {"params": self.params})

    def answer(self, query: Query, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
        params = check_array(query.spec["params"], "params", ndim=1)
        model = self._model.set_params_vector(params)
        if isinstance(model, TorchModel):
            total, clipped = _torch_clipped_sum(model, X, y, self.clip_norm)
        else:
            grads, clipped = clip_l2(model.per_example_gradients(X, y), self.clip_norm)
            total = grads.sum(axis=0)
        count = self.count_weight * self.clip_norm * X.shape[0]
        return np.append(total, count), clipped

    def update(self, query: Query, aggregate: QueryAnswer) -> None:
        values = _checked_values(query, aggregate)
        p = self.params.size
        self.counts.append(float(values[p]) / (self.count_weight * self.clip_norm))
        n = max(1.0, float(np.mean(self.counts)))
        step = values[:p] / n
        alpha = float(getattr(self._model, "alpha", 0.0) or 0.0)
        if alpha:
            step = step + alpha * self._model._regularized() * self.params
        self.params = self.params - self.learning_rate * step
        self.round += 1


def _torch_clipped_sum(model: Any, X: np.ndarray, y: np.ndarray,
                       clip_norm: float) -> tuple[np.ndarray, int]:
    """The clipped per-example gradient sum of a TorchModel (veil.learn.dpsgd)."""
    import torch

    from veil.learn.dpsgd import clipped_grad_sum

    inputs = torch.from_numpy(np.ascontiguousarray(X)).to(model._dtype)
    targets = torch.from_numpy(model._codes(np.asarray(y), X.shape[0]).astype(np.int64))
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    result = clipped_grad_sum(model.module_, loss, inputs, targets, clip_norm)
    return result.grad.detach().to(torch.float64).numpy(), int(result.n_clipped)
