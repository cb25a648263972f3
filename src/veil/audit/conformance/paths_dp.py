"""Registered release paths of :mod:`veil.dp`: every mechanism, the statistics, the group-by
query (pandas and Spark), sample-and-aggregate and the sparse vector.

Mechanism cases feed the mechanism two query answers one sensitivity apart (the worst
neighbours for a mechanism calibrated to that sensitivity); statistics get whole datasets,
with a record at each declared bound or far outside it (clipping) as the neighbour.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil.audit.conformance.registry import ADD_REMOVE, REPLACE, Pair, register
from veil.dp import (
    AboveThreshold,
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Laplace,
    Ledger,
    RandomizedResponse,
    ReportNoisyMax,
    SparseVector,
    sample_and_aggregate,
    stats,
)
from veil.dp.distributed import DistributedGaussian, DistributedLaplace, DistributedSkellam
from veil.dp.query import Query

EPS, DELTA = 1.0, 1e-5


def _values(*pairs: tuple[str, object, object]):
    return lambda: [Pair(n, a, b) for n, a, b in pairs]


def _release(mechanism):
    """run(value, rng): one release of ``mechanism`` through a throwaway ledger."""
    def run(value, rng):
        return Ledger(mechanism.epsilon, mechanism.delta).release(mechanism, value, rng=rng)
    return run


def _shape(out) -> tuple:
    return np.shape(out)


# -- mechanisms ------------------------------------------------------------------------
register("dp.Laplace", relation=ADD_REMOVE, epsilon=EPS, pairs=_values(("f=0 | f=1", 0.0, 1.0)),
         reduce=float, structure=_shape, trials=800,
         covers=("veil.dp.laplace:Laplace",))(_release(Laplace(EPS)))
register("dp.Gaussian", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
         pairs=_values(("f=0 | f=1", 0.0, 1.0)), reduce=float, structure=_shape, trials=800,
         covers=("veil.dp.gaussian:Gaussian",))(_release(Gaussian(EPS, DELTA)))
register("dp.DiscreteLaplace", relation=ADD_REMOVE, epsilon=EPS,
         pairs=_values(("f=0 | f=1", 0, 1)), reduce=float, structure=_shape, trials=800,
         covers=("veil.dp.laplace:DiscreteLaplace",))(_release(DiscreteLaplace(EPS)))
register("dp.DiscreteGaussian", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
         pairs=_values(("f=0 | f=1", 0, 1)), reduce=float, structure=_shape, trials=800,
         covers=("veil.dp.gaussian:DiscreteGaussian",))(_release(DiscreteGaussian(EPS, DELTA)))
# utilities of 3 candidates; the neighbour moves every utility by the sensitivity, the
# hardest case for a non-monotone utility
register("dp.Exponential", relation=ADD_REMOVE, epsilon=EPS,
         pairs=_values(("u=(1,0,0) | u=(0,1,1)", np.array([1.0, 0.0, 0.0]),
                        np.array([0.0, 1.0, 1.0]))),
         reduce=lambda i: float(i == 0), trials=800,
         covers=("veil.dp.selection:Exponential",))(_release(Exponential(EPS)))
register("dp.ReportNoisyMax", relation=ADD_REMOVE, epsilon=EPS,
         pairs=_values(("s=(1,0,0) | s=(0,1,1)", np.array([1.0, 0.0, 0.0]),
                        np.array([0.0, 1.0, 1.0]))),
         reduce=lambda i: float(i == 0), trials=800,
         covers=("veil.dp.selection:ReportNoisyMax",))(_release(ReportNoisyMax(EPS)))
# randomized response protects one label: its neighbours replace the label
register("dp.RandomizedResponse", relation=REPLACE, epsilon=EPS,
         pairs=_values(("label 0 | label 2", 0, 2)), reduce=lambda v: float(v == 0),
         structure=_shape, trials=800,
         covers=("veil.dp.randomized_response:RandomizedResponse",))(
    _release(RandomizedResponse(EPS, 3)))
# every answer moves by the sensitivity, in opposite directions around the threshold
register("dp.AboveThreshold", relation=ADD_REMOVE, epsilon=EPS,
         pairs=_values(("answers below | above", np.array([0.0, 0.0, 1.0]),
                        np.array([1.0, 1.0, 0.0]))),
         reduce=lambda i: -1.0 if i is None else float(i), trials=800,
         covers=("veil.dp.sparse_vector:AboveThreshold",))(
    _release(AboveThreshold(EPS, threshold=0.5)))


@register("dp.SparseVector", relation=ADD_REMOVE, epsilon=EPS,
          pairs=_values(("answers below | above", [0.0, 0.0, 1.0], [1.0, 1.0, 0.0])),
          reduce=lambda answers: float(len(answers)), trials=800,
          covers=("veil.dp.sparse_vector:SparseVector.query",))
def _sparse_vector(answers, rng):
    run = SparseVector(EPS, threshold=0.5, ledger=Ledger(EPS), rng=rng)
    out = []
    for a in answers:
        out.append(run.query(a))
        if out[-1]:
            break
    return out


def _honest_only(mechanism):
    """The threat model of distributed noise: the adversary knows the shares of the
    ``parties - honest`` others, so only ``honest`` shares protect the sum."""
    def run(value, rng):
        x = mechanism.check(value)
        Ledger(mechanism.epsilon, mechanism.delta).charge(mechanism.event,
                                                          delta=mechanism.delta or None)
        return float(x + sum(mechanism.share(np.shape(x), rng) for _ in range(mechanism.honest)))
    return run


_DIST = dict(parties=5, honest=3)
_DIST_TRIALS = 400
register("dp.DistributedGaussian", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
         pairs=_values(("sum=0 | sum=1", 0.0, 1.0)), reduce=float, trials=_DIST_TRIALS,
         covers=("veil.dp.distributed:DistributedGaussian",))(
    _honest_only(DistributedGaussian(EPS, DELTA, **_DIST)))
register("dp.DistributedLaplace", relation=ADD_REMOVE, epsilon=EPS,
         pairs=_values(("sum=0 | sum=1", 0.0, 1.0)), reduce=float, trials=_DIST_TRIALS,
         covers=("veil.dp.distributed:DistributedLaplace",))(
    _honest_only(DistributedLaplace(EPS, **_DIST)))
register("dp.DistributedSkellam", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
         pairs=_values(("sum=0 | sum=1", 0, 1)), reduce=float, trials=_DIST_TRIALS,
         covers=("veil.dp.distributed:DistributedSkellam",))(
    _honest_only(DistributedSkellam(EPS, DELTA, l2_sensitivity=1.0, **_DIST)))


# -- statistics ------------------------------------------------------------------------
_BASE = np.linspace(0.1, 0.9, 20)
_STAT_PAIRS = _values(
    ("one record at the upper bound", _BASE, np.append(_BASE, 1.0)),
    ("one record at the lower bound", _BASE, np.append(_BASE, 0.0)),
    ("one record far outside the bounds", _BASE, np.append(_BASE, 1e9)),
)


def _stat(fn, **kw):
    def run(data, rng):
        return fn(data, epsilon=EPS, ledger=Ledger(EPS), rng=rng, **kw)
    return run


def _value(result) -> float:
    return float(np.sum(result.value))


def _keys(result):
    return (type(result.value).__name__, np.shape(result.value), sorted(result.details))


for _name, _fn, _kw in (
        ("count", stats.count, {}),
        ("sum", stats.sum, {"bounds": (0.0, 1.0)}),
        ("mean", stats.mean, {"bounds": (0.0, 1.0)}),
        ("variance", stats.variance, {"bounds": (0.0, 1.0)}),
        ("quantile", stats.quantile, {"q": 0.5, "bounds": (0.0, 1.0)}),
        ("histogram", stats.histogram, {"bins": [0.0, 0.5, 1.0]})):
    register(f"dp.stats.{_name}", relation=ADD_REMOVE, epsilon=EPS, pairs=_STAT_PAIRS,
             reduce=_value, structure=_keys, trials=300,
             covers=("veil.dp.stats:_release",))(_stat(_fn, **_kw))


@register("dp.sample_and_aggregate", relation=ADD_REMOVE, epsilon=EPS,
          pairs=_STAT_PAIRS, reduce=_value, structure=_keys, trials=300,
          covers=("veil.dp.sensitivity:sample_and_aggregate",))
def _sample_and_aggregate(data, rng):
    return sample_and_aggregate(data, np.mean, blocks=4, bounds=(0.0, 1.0), epsilon=EPS,
                                ledger=Ledger(EPS), rng=rng)


# -- the group-by query ----------------------------------------------------------------
_Q_EPS, _Q_DELTA = 0.5, 1e-2
_SELECTED = Query("unit", max_groups=1, max_rows=1).group_by("g").count()
_PUBLIC = Query("unit", max_groups=1, max_rows=1).group_by("g", keys=["a", "b"]).count()


def _table(units, groups) -> pd.DataFrame:
    return pd.DataFrame({"unit": units, "g": groups})


#: partitions only the added unit holds: each has a small chance to pass the threshold if it
#: is a candidate at all (it must not be: the unit keeps max_groups=1 of them, none alone)
_LONE = 1000
_COMMON = _table([f"u{i}" for i in range(30)], ["a"] * 30)


def _query_pairs():
    lone = _table([f"u{i}" for i in range(30)] + ["x"] * _LONE,
                  ["a"] * 30 + [f"lone{j}" for j in range(_LONE)])
    return [
        Pair("one unit in one shared group", _COMMON,
             pd.concat([_COMMON, _table(["x"], ["a"])], ignore_index=True)),
        Pair("a unit alone in many partitions", _COMMON, lone),
    ]


def _pandas_pairs():
    return _query_pairs()


def _lone_released(result) -> float:
    """The event an attacker watches: some partition only the added unit holds is out."""
    return float(any(str(k).startswith("lone") for k in result.table.index))


def _run_query(query, to_frame=lambda df: df):
    def run(data, rng):
        return query.run(to_frame(data), epsilon=_Q_EPS, delta=_Q_DELTA,
                         ledger=Ledger(_Q_EPS, _Q_DELTA), rng=rng)
    return run


register("dp.query (pandas, DP-selected groups)", relation=ADD_REMOVE, epsilon=_Q_EPS,
         delta=_Q_DELTA, pairs=_pandas_pairs, reduce=_lone_released, threshold=0.5,
         structure=lambda r: list(r.table.columns), trials=24,
         covers=("veil.dp.query.query:Query.run", "veil.dp.query.release:QueryMechanism"))(
    _run_query(_SELECTED))
register("dp.query (pandas, public keys)", relation=ADD_REMOVE, epsilon=_Q_EPS,
         delta=_Q_DELTA, pairs=_query_pairs,
         reduce=lambda r: float(r.table["count"].sum()),
         structure=lambda r: (list(r.table.columns), list(r.table.index)), trials=6)(
    _run_query(_PUBLIC))


def _spark(df: pd.DataFrame):
    from veil.dp.query.spark import session

    return session().createDataFrame(df)


register("dp.query (Spark, DP-selected groups)", relation=ADD_REMOVE, epsilon=_Q_EPS,
         delta=_Q_DELTA, pairs=_query_pairs, reduce=_lone_released, threshold=0.5,
         structure=lambda r: list(r.table.columns), trials=10, needs=("pyspark", "pyarrow"),
         fast=False)(
    _run_query(_SELECTED, _spark))
