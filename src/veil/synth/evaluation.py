"""How good, and how private, a synthetic table is: workload error, ML efficacy, and a
membership-inference audit.

* **Workload error** (McKenna et al. 2022, Section 6): the mean over the workload's
  marginals (default: every 3-way marginal) of ``|| M_r(real) / n - M_r(synthetic) / m ||_1``
  (normalised counts; 0 is perfect, 2 the worst).
* **ML efficacy**: a classifier for ``target`` (logistic regression on one-hot codes)
  trained on the synthetic table and tested on real held-out rows, beside the same model
  trained on the real table: accuracy and AUC (one-vs-rest for several classes).
* **Membership inference** against the synthetic table: the members are the real rows the
  synthesizer was fitted on, the non-members the held-out rows. Two attacks score a
  record: distance to the closest synthetic record (DCR: minus the Hamming distance, higher
  = member) and a density ratio (DOMIAS, van Breugel et al. 2023: the synthetic table's
  density at the record over a reference density from other real rows, both Hamming-kernel
  estimates ``mean_j exp(-h(x, y_j))``). Each attack's AUC, and an empirical lower bound on
  epsilon from one run (:func:`veil.audit.one_run_epsilon_lower_bound`, Steinke, Nasr &
  Jagielski 2023), which must stay below the certificate. That bound holds when each row of
  ``real`` + ``holdout`` was assigned to one or the other by a fair coin before the fit
  (:func:`coin_split` does it); the audited rows are drawn from their union regardless of
  the coins, the reference rows are the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

from veil._validation import check_delta, check_int
from veil.audit.metrics import auc
from veil.audit.one_run import one_run_epsilon_lower_bound
from veil.errors import ConfigError
from veil.random import RngLike, check_rng
from veil.synth.model import marginal_counts
from veil.synth.schema import Column, Schema

__all__ = ["SynthEvaluation", "evaluate", "coin_split", "ml_efficacy", "workload_error"]


@dataclass(frozen=True)
class SynthEvaluation:
    """What :func:`evaluate` found (``to_dict`` for JSON)."""

    workload_error: float
    workload_size: int
    ml: dict[str, float] = field(default_factory=dict)
    attacks: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def coin_split(data: pd.DataFrame, rng: RngLike = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(train, holdout)``: each row to one of them by a fair coin (the split the
    membership audit's epsilon bound needs)."""
    coins = check_rng(rng).random(len(data)) < 0.5
    return data[coins].reset_index(drop=True), data[~coins].reset_index(drop=True)


def workload_error(real: np.ndarray, synthetic: np.ndarray, sizes: Sequence[int],
                   workload: Sequence[tuple[int, ...]]) -> float:
    """Mean L1 distance between normalised marginals of two coded tables."""
    return float(np.mean([np.abs(marginal_counts(real, sizes, r) / max(len(real), 1)
                                 - marginal_counts(synthetic, sizes, r) / max(len(synthetic), 1)
                                 ).sum() for r in workload]))


def _schema_of(*tables: pd.DataFrame) -> Schema:
    """All columns categorical, with the values any table holds (evaluation only: this
    schema is never released)."""
    cols = tables[0].columns
    return Schema(tuple(Column(str(c), "categorical", categories=tuple(sorted(
        {str(v) for t in tables for v in t[c].dropna().unique()}))) for c in cols))


def _hamming_close(queries: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query row: the smallest Hamming distance to ``rows`` and the kernel
    density ``mean_j exp(-h(q, row_j))``."""
    nearest, density = np.empty(len(queries)), np.empty(len(queries))
    for start in range(0, len(queries), 64):
        q = queries[start:start + 64]
        h = (q[:, None, :] != rows[None, :, :]).sum(axis=2)
        nearest[start:start + 64] = h.min(axis=1)
        density[start:start + 64] = np.exp(-h).mean(axis=1)
    return nearest, density


def ml_efficacy(train: dict[str, np.ndarray], test: np.ndarray, sizes: Sequence[int],
        target: int) -> dict[str, float]:
    """Accuracy and AUC on ``test`` (codes) of a logistic regression for column ``target``,
    trained on each coded table of ``train`` (``{name: codes}``)."""
    features = [j for j in range(len(sizes)) if j != target]

    offsets = np.cumsum([0] + [sizes[j] for j in features])

    def onehot(codes: np.ndarray) -> sparse.csr_matrix:
        cols = (codes[:, features] + offsets[:-1]).ravel()
        rows = np.repeat(np.arange(len(codes)), len(features))
        return sparse.csr_matrix((np.ones(cols.size), (rows, cols)),
                                 shape=(len(codes), offsets[-1]))

    out = {}
    y_test = test[:, target]
    for name, codes in train.items():
        if np.unique(codes[:, target]).size < 2:
            out[f"{name}_accuracy"] = float("nan")
            continue
        model = LogisticRegression(max_iter=500).fit(onehot(codes), codes[:, target])
        proba = model.predict_proba(onehot(test))
        out[f"{name}_accuracy"] = float(accuracy_score(y_test, model.classes_[proba.argmax(1)]))
        present = np.isin(y_test, model.classes_)
        if proba.shape[1] == 2 and np.unique(y_test).size == 2:
            out[f"{name}_auc"] = float(roc_auc_score(y_test == model.classes_[1], proba[:, 1]))
        elif present.all() and np.unique(y_test).size == proba.shape[1]:
            out[f"{name}_auc"] = float(roc_auc_score(y_test, proba, multi_class="ovr",
                                                     labels=model.classes_))
    return out


def evaluate(real: pd.DataFrame, synthetic: pd.DataFrame, *, holdout: pd.DataFrame | None = None,
             schema: Schema | None = None, workload: Sequence[Sequence[str]] | None = None,
             target: str | None = None, delta: float = 1e-6, audit_rows: int = 1000,
             reference_rows: int = 2000, rng: RngLike = None) -> SynthEvaluation:
    """Evaluate ``synthetic`` against the ``real`` table it was fitted on (module docstring).

    ``holdout``: real rows not fitted on (ML efficacy and the membership audit need it);
    ``schema``: the declared one (None: every column categorical with the values seen);
    ``workload``: column-name tuples (None: all 3-way marginals); ``target``: the column to
    predict; ``delta``: of the audit's epsilon bound; ``audit_rows``: rows audited (drawn
    from real + holdout), ``reference_rows``: rows of the reference density.
    """
    gen = check_rng(rng)
    delta = check_delta(delta)
    check_int(audit_rows, "audit_rows", low=2)
    check_int(reference_rows, "reference_rows", low=1)
    tables = [real, synthetic] + ([holdout] if holdout is not None else [])
    schema = _schema_of(*tables) if schema is None else schema
    coded = [schema.encode(t) for t in tables]
    names, sizes = schema.names, schema.sizes
    if workload is None:
        sets = list(itertools.combinations(range(len(names)), min(3, len(names))))
    else:
        unknown = [c for entry in workload for c in entry if c not in names]
        if unknown or not workload:
            raise ConfigError(f"workload={workload!r} is not allowed: tuples of the table's "
                              f"columns {names} (unknown: {unknown})")
        sets = [tuple(sorted(names.index(c) for c in entry)) for entry in workload]
    error = workload_error(coded[0], coded[1], sizes, sets)
    if holdout is None:
        return SynthEvaluation(error, len(sets))
    ml = {}
    if target is not None:
        if target not in names:
            raise ConfigError(f"target={target!r} is not allowed: one of {names}")
        ml = ml_efficacy({"synthetic": coded[1], "real": coded[0]}, coded[2], sizes,
                 names.index(target))
    union = np.concatenate([coded[0], coded[2]])
    member = np.concatenate([np.ones(len(coded[0]), bool), np.zeros(len(coded[2]), bool)])
    order = gen.permutation(len(union))
    audited = order[:min(audit_rows, len(union) // 2)]
    reference = union[order[len(audited):len(audited) + reference_rows]]
    queries = union[audited]
    nearest, density = _hamming_close(queries, coded[1])
    _, ref_density = _hamming_close(queries, reference)
    scores = {"dcr": -nearest, "density": np.log(density) - np.log(ref_density)}
    attacks = {}
    for name, s in scores.items():
        bound = one_run_epsilon_lower_bound(s, member[audited], delta=delta, rng=gen)
        attacks[name] = {"auc": auc(s[member[audited]], s[~member[audited]]),
                         "epsilon_lower_bound": bound.epsilon,
                         "max_certifiable": bound.max_certifiable}
    return SynthEvaluation(error, len(sets), ml, attacks)
