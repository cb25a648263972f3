"""``anonymize``: one entry point for the anonymization algorithms.

* ``"optimal"`` — full-domain generalization with record suppression, optimal for the
  chosen ``metric`` (:mod:`veil.anon.lattice`); needs a hierarchy per quasi-identifier.
* ``"mondrian"`` — multidimensional partitioning (:mod:`veil.anon.mondrian`); hierarchies
  are optional (they order categories).
* ``"mdav"`` — microaggregation of numeric quasi-identifiers (:mod:`veil.anon.microaggregation`);
  k-anonymity only.
* ``"anatomy"`` — quasi-identifier table + sensitive table with l-diverse groups
  (:mod:`veil.anon.anatomy`); one :class:`~veil.anon.models.LDiversity` model.

The input table is never modified; the result holds a new released table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from veil.anon.anatomy import anatomy_groups
from veil.anon.check import CheckReport, check, report_from_classes
from veil.anon.encoding import EncodedTable, SensitiveDomain
from veil.anon.hierarchy import Hierarchy
from veil.anon.lattice import LatticeSearch, Unsatisfiable
from veil.anon.metrics import (
    MONOTONIC_VARIANTS,
    OBJECTIVES,
    SUPPRESSED,
    class_ids,
    generalization_loss,
    information_loss,
    nonuniform_entropy,
    risk_from_sizes,
)
from veil.anon.microaggregation import mdav, standardize
from veil.anon.models import KAnonymity, LDiversity, PrivacyModel, TCloseness, max_suppressed
from veil.anon.mondrian import OrderedColumn, mondrian_partition, release_partitions
from veil.anon.risk import RiskAnalysis, SampleModel, analyze_risk
from veil.errors import ConfigError, DataError
from veil.random import RngLike

log = logging.getLogger(__name__)

__all__ = ["ALGORITHMS", "AnonymizationResult", "anonymize"]

ALGORITHMS = ("optimal", "mondrian", "mdav", "anatomy")


@dataclass(frozen=True)
class AnonymizationResult:
    """A released table and what it achieves.

    ``table``: the released records (same columns and order as the input; suppressed
    records have ``*`` in every quasi-identifier; for anatomy the quasi-identifier table,
    with a ``group`` column and without the sensitive one). ``classes``: one row per
    equivalence class (released quasi-identifiers and ``size``). ``levels``: the
    generalization level per quasi-identifier (optimal only). ``metrics``: utility, risk
    and the privacy achieved. ``sensitive_table``: anatomy's (group, value, count) table.
    ``search``: lattice size, nodes checked and seconds (optimal only). ``risk``: the
    re-identification risks (:func:`veil.anon.risk.analyze_risk`) of the input
    (``"before"``) and of the released table (``"after"``).
    """

    table: pd.DataFrame
    algorithm: str
    quasi_identifiers: tuple[str, ...]
    sensitive: str | None
    models: tuple[PrivacyModel, ...]
    classes: pd.DataFrame
    metrics: dict[str, float]
    levels: dict[str, int] | None = None
    suppressed: int = 0
    sensitive_table: pd.DataFrame | None = None
    search: dict[str, float] = field(default_factory=dict)
    risk: dict[str, RiskAnalysis] = field(default_factory=dict)


def _hierarchy(column: str, value: Any) -> Hierarchy | None:
    if value is None or isinstance(value, Hierarchy):
        return value
    if isinstance(value, (pd.DataFrame, np.ndarray, list, tuple)):
        return Hierarchy(value, name=column)
    raise ConfigError(f"quasi_identifiers[{column!r}]={type(value).__name__} is not allowed: "
                      "pass a Hierarchy, a table of hierarchy rows, or None")


def _validate(df: Any, quasi_identifiers: Any, sensitive: str | None,
              models: Sequence[PrivacyModel]) -> dict[str, Hierarchy | None]:
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"the table must be a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise DataError("the table is empty; expected at least one record")
    if isinstance(quasi_identifiers, Mapping):
        qis = {str(c): _hierarchy(str(c), h) for c, h in quasi_identifiers.items()}
    elif isinstance(quasi_identifiers, Sequence) and not isinstance(quasi_identifiers, str):
        qis = {str(c): None for c in quasi_identifiers}
    else:
        raise ConfigError(f"quasi_identifiers={quasi_identifiers!r} is not allowed: pass "
                          "{column: Hierarchy} or a list of columns")
    if not qis:
        raise ConfigError("quasi_identifiers is empty: name at least one column")
    for col in list(qis) + ([sensitive] if sensitive is not None else []):
        if col not in df.columns:
            raise DataError(f"column {col!r} is not in the table (columns: {list(df.columns)})")
    if sensitive is not None and sensitive in qis:
        raise ConfigError(f"sensitive={sensitive!r} is not allowed: it is also a "
                          "quasi-identifier")
    if isinstance(models, PrivacyModel) or not models:
        raise ConfigError("models must be a non-empty list of privacy models, e.g. "
                          "[KAnonymity(5)]")
    for model in models:
        if not isinstance(model, PrivacyModel):
            raise ConfigError(f"models: {model!r} is not a privacy model (KAnonymity, "
                              "LDiversity, TCloseness, ... from veil.anon)")
        if model.needs_sensitive and sensitive is None:
            raise ConfigError(f"{model} needs a sensitive attribute: pass sensitive=<column>")
    return qis


def _closeness(models: Sequence[PrivacyModel]) -> TCloseness | None:
    return next((m for m in models if isinstance(m, TCloseness)), None)


def _recursive_l(models: Sequence[PrivacyModel]) -> int | None:
    return next((m.l for m in models if isinstance(m, LDiversity) and m.variant == "recursive"),
                None)


def _report(counts: np.ndarray, hist: np.ndarray | None, domain: SensitiveDomain | None,
            models: Sequence[PrivacyModel]) -> CheckReport:
    return report_from_classes(counts, hist, domain, l=_recursive_l(models),
                               closeness=_closeness(models))


def _privacy_metrics(report: CheckReport, sizes: np.ndarray,
                     risk_threshold: float) -> dict[str, float]:
    """k, l, c, t achieved, and the prosecutor risk of classes of the given sizes."""
    out: dict[str, float] = {key: value for key, value in report.as_dict().items()
                             if key not in ("records", "classes", "t_distance", "l")}
    risk = risk_from_sizes(sizes, risk_threshold)
    out.update(highest_risk=risk.highest, average_risk=risk.average,
               records_at_risk=risk.records_at_risk)
    return out


def anonymize(df: pd.DataFrame, quasi_identifiers: Mapping[str, Any] | Sequence[str],
              sensitive: str | None = None, models: Sequence[PrivacyModel] = (), *,
              algorithm: str = "optimal", suppression_limit: float = 0.0,
              metric: str = "entropy", monotonic: bool = False, strict: bool = False,
              risk_threshold: float = 0.2, population_size: float | None = None,
              rng: RngLike = None) -> AnonymizationResult:
    """Anonymize ``df`` so that every model in ``models`` holds.

    Parameters
    ----------
    quasi_identifiers : ``{column: Hierarchy}`` (hierarchies are needed by ``"optimal"``,
        optional for ``"mondrian"``, ignored otherwise) or a list of columns.
    sensitive : the sensitive column (needed by l-diversity, t-closeness and anatomy).
    models : e.g. ``[KAnonymity(5), LDiversity(3), TCloseness(0.2)]``.
    algorithm : ``"optimal"``, ``"mondrian"``, ``"mdav"`` or ``"anatomy"``.
    suppression_limit : share of records that may be suppressed (``"optimal"`` only).
    metric : objective of ``"optimal"``: ``"entropy"`` (non-uniform entropy, ARX's),
        ``"discernibility"`` (DM*), ``"aecs"``, ``"loss"`` (LM/NCP), ``"precision"`` or
        ``"arx_loss"`` (ARX's loss metric, geometric mean over attributes).
    monotonic : ARX's monotonic variant of ``"entropy"`` and ``"discernibility"`` under
        suppression: a suppressed record costs what it would cost in its class, as if it
        were kept (ARX's ``createEntropyMetric(true)`` and ``MetricSDDiscernability``).
        The default (False) is ARX's non-monotonic variant, which charges suppression:
        :mod:`veil.anon.metrics` states both. Without suppression they coincide.
    strict : Mondrian's strict (non-overlapping) cuts instead of relaxed ones.
    risk_threshold : records whose prosecutor risk exceeds it count as at risk.
    population_size : the size of the population the table was sampled from: the risk
        analysis before and after (``result.risk``) then estimates population uniqueness.
    rng : randomness of anatomy (:mod:`veil.random`; secure by default).

    Raises DataError when the models cannot be met (within the suppression limit), with
    the best achievable values, or cannot be met by any algorithm (k above the number of
    records, l above the number of distinct sensitive values).
    """
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm={algorithm!r} is not allowed: choose one of "
                          f"{', '.join(map(repr, ALGORITHMS))}")
    if metric not in OBJECTIVES:
        raise ConfigError(f"metric={metric!r} is not allowed: choose one of "
                          f"{', '.join(map(repr, OBJECTIVES))}")
    if isinstance(suppression_limit, bool) or not isinstance(
            suppression_limit, (int, float)) or not 0 <= suppression_limit <= 1:
        raise ConfigError(f"suppression_limit={suppression_limit!r} is not allowed: must be "
                          "a share in [0, 1]")
    if suppression_limit and algorithm != "optimal":
        raise ConfigError(f"suppression_limit={suppression_limit!r} is not allowed with "
                          f"algorithm={algorithm!r}: only 'optimal' suppresses records")
    if not isinstance(monotonic, bool):
        raise ConfigError(f"monotonic={monotonic!r} is not allowed: pass True or False")
    if monotonic and metric not in MONOTONIC_VARIANTS:
        raise ConfigError(f"monotonic=True is not allowed with metric={metric!r}: only "
                          f"{' and '.join(map(repr, MONOTONIC_VARIANTS))} have a monotonic "
                          "variant")
    risk_from_sizes(np.ones(1), risk_threshold)  # validates the threshold
    qis = _validate(df, quasi_identifiers, sensitive, models)
    models = tuple(models)
    if algorithm != "optimal":
        for model in models:
            if isinstance(model, SampleModel) or not model.monotone or getattr(
                    model, "population", None) is not None:
                raise ConfigError(f"{model} is not allowed with algorithm={algorithm!r}: "
                                  "it needs algorithm='optimal' (it is not a monotone "
                                  "model of each class)")
    for model in models:
        model.prepare(len(df))
    _check_possible(df, sensitive, models)
    before = analyze_risk(df, list(qis), threshold=risk_threshold,
                          population_size=population_size)
    runner = {"optimal": _optimal, "mondrian": _mondrian, "mdav": _mdav,
              "anatomy": _anatomy}[algorithm]
    result = runner(df, qis, sensitive, models, suppression_limit=suppression_limit,
                    metric=metric, monotonic=monotonic, strict=strict,
                    risk_threshold=risk_threshold, rng=rng)
    after = analyze_risk(result.table, list(qis), threshold=risk_threshold,
                         population_size=population_size)
    return replace(result, risk={"before": before, "after": after})


def _check_possible(df: pd.DataFrame, sensitive: str | None,
                    models: Sequence[PrivacyModel]) -> None:
    """Refuse models no algorithm can meet: every kept class needs k records and l
    distinct sensitive values (entropy and recursive l-diversity need them too)."""
    for model in models:
        if isinstance(model, KAnonymity) and model.k > len(df):
            raise DataError(f"{model} is impossible: the table has only {len(df)} records, "
                            f"and every released class must hold at least k={model.k}")
        if isinstance(model, LDiversity):
            distinct = int(df[sensitive].nunique())
            if model.l > distinct:
                raise DataError(f"{model} is impossible: sensitive column {sensitive!r} "
                                f"holds only {distinct} distinct values, and every released "
                                f"class needs at least l={model.l}")


def _domain(df: pd.DataFrame, sensitive: str | None,
            models: Sequence[PrivacyModel]) -> SensitiveDomain | None:
    domain = None if sensitive is None else SensitiveDomain(sensitive, df[sensitive])
    for model in models:
        model.bind(domain)
    return domain


def _optimal(df, qis, sensitive, models, *, suppression_limit, metric, monotonic,
             risk_threshold, **_) -> AnonymizationResult:
    missing = [c for c, h in qis.items() if h is None]
    if missing:
        raise ConfigError(f"algorithm='optimal' needs a hierarchy for every quasi-identifier; "
                          f"{missing[0]!r} has none")
    domain = _domain(df, sensitive, models)
    start = time.perf_counter()
    enc = EncodedTable(df, qis, domain,
                       histograms=any(m.needs_sensitive for m in models))
    encoded = time.perf_counter()
    limit = max_suppressed(suppression_limit, len(df))
    search = LatticeSearch(enc, models, limit, OBJECTIVES[metric](enc, monotonic=monotonic))
    try:
        found = search.run()
    except Unsatisfiable as exc:
        raise DataError(_unsatisfiable(exc.top, enc, models, suppression_limit, limit)) from None
    timing = {"encode_seconds": encoded - start, "seconds": time.perf_counter() - encoded}
    ev = found.evaluation
    table, kept = ev.table, ev.kept
    row_class = enc.row_classes(table, ev.levels)
    gone = ~kept[row_class]
    released = df.copy(deep=False)    # copy-on-write: the input's columns stay intact
    for j, col in enumerate(enc.columns):
        labels = col.labels[ev.levels[j]][table.codes[row_class, j]]
        labels[gone] = SUPPRESSED
        released[col.name] = labels
    classes = pd.DataFrame({col.name: col.labels[ev.levels[j]][table.codes[kept, j]]
                            for j, col in enumerate(enc.columns)})
    classes["size"] = table.counts[kept]
    metrics = {name: OBJECTIVES[name](enc, monotonic=monotonic and name == metric).loss(
        ev.levels, table, kept) for name in ("entropy", "discernibility", "aecs", "loss",
                                             "arx_loss")}
    metrics["discernibility"] = int(metrics["discernibility"])
    metrics["precision"] = 1.0 - OBJECTIVES["precision"](enc).loss(ev.levels, table, kept)
    sizes = table.counts[kept]
    hist = table.hist
    if hist is None and domain is not None:
        hist = np.bincount(row_class * domain.size + domain.codes,
                           minlength=len(table) * domain.size).reshape(len(table), -1)
    report = _report(sizes, None if hist is None else hist[kept], domain, models)
    if ev.suppressed:
        sizes = np.r_[sizes, ev.suppressed]
    metrics.update(_privacy_metrics(report, sizes, risk_threshold))
    metrics.update(classes=int(kept.sum()), suppressed=ev.suppressed)
    return AnonymizationResult(
        released, "optimal", tuple(qis), sensitive, models, classes, metrics,
        levels={c.name: int(lv) for c, lv in zip(enc.columns, ev.levels)},
        suppressed=ev.suppressed,
        search={"nodes": found.nodes, "checked": found.checked, **timing})


def _unsatisfiable(top, enc: EncodedTable, models, suppression_limit: float,
                   limit: int) -> str:
    report = _report(top.table.counts, top.table.hist, enc.sensitive, models)
    achieved = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in report.as_dict().items()
                         if k in ("k", "l_distinct", "l_entropy", "c", "t"))
    share = top.suppressed / enc.n
    advice = (f"Raise suppression_limit to at least {share:.4g} or relax the models."
              if top.suppressed < enc.n else "No suppression limit can help (it would "
              "suppress every record): relax the models.")
    return (f"the privacy models [{', '.join(map(str, models))}] cannot be met within "
            f"suppression_limit={suppression_limit:g} ({limit} of {enc.n} records): the most "
            f"general transformation {dict(zip(enc.names, top.levels.tolist()))} still has "
            f"{top.suppressed} records ({share:.2%}) in classes that violate them. Best "
            f"achievable there: {achieved}. {advice}")


def _released_result(df: pd.DataFrame, released: pd.DataFrame, qis: Sequence[str],
                     sensitive: str | None, models, algorithm: str, risk_threshold: float,
                     extra: Mapping[str, float]) -> AnonymizationResult:
    """Result of a local recoding: classes and metrics from the released table itself."""
    ids, sizes = class_ids(released, qis)
    first = np.unique(ids, return_index=True)[1]
    classes = released.iloc[first][list(qis)].reset_index(drop=True)
    classes["size"] = sizes
    closeness = _closeness(models)
    if sensitive is None:
        report = check(released, qis)
    else:
        report = check(released, qis, sensitive, l=_recursive_l(models),
                       distance=closeness.distance if closeness else "auto",
                       sensitive_hierarchy=closeness.hierarchy if closeness else None)
    metrics: dict[str, float] = {
        "entropy": nonuniform_entropy(df, released, qis),
        "discernibility": int(np.sum(sizes.astype(np.int64) ** 2)),
        "aecs": float(len(df) / sizes.size),
        "loss": generalization_loss(df, released, qis),
    }
    metrics.update(extra)
    metrics.update(_privacy_metrics(report, sizes, risk_threshold))
    metrics.update(classes=int(sizes.size), suppressed=0)
    return AnonymizationResult(released, algorithm, tuple(qis), sensitive, tuple(models),
                               classes, metrics)


def _unmet(models, report: CheckReport, what: str) -> DataError:
    achieved = ", ".join(f"{k}={v}" for k, v in report.as_dict().items()
                         if k in ("k", "l_distinct", "l_entropy", "c", "t"))
    return DataError(f"the privacy models [{', '.join(map(str, models))}] cannot be met: "
                     f"{what} achieves only {achieved}")


def _mondrian(df, qis, sensitive, models, *, strict, risk_threshold, **_):
    domain = _domain(df, sensitive, models)
    columns = [OrderedColumn(c, df[c], h) for c, h in qis.items()]
    root_counts = np.array([len(df)])
    root_hist = None if domain is None else np.bincount(domain.codes)[None, :]
    if not all(m.satisfied(root_counts, root_hist, domain).all() for m in models):
        raise _unmet(models, _report(root_counts, root_hist, domain, models),
                     "the whole table (one class)")
    parts = mondrian_partition(columns, models, domain, strict=strict)
    released = df.copy()
    for name, values in release_partitions(columns, parts).items():
        released[name] = values
    return _released_result(df, released, list(qis), sensitive, models, "mondrian",
                            risk_threshold, {"partitions": int(parts.max()) + 1})


def _mdav(df, qis, sensitive, models, *, risk_threshold, **_):
    other = [m for m in models if not isinstance(m, KAnonymity)]
    if other:
        raise ConfigError(f"algorithm='mdav' achieves k-anonymity only; {other[0]} is not "
                          "supported (use 'optimal' or 'mondrian')")
    k = max(m.k for m in models)
    values = []
    for c in qis:
        if df[c].isna().any():
            raise DataError(f"column {c!r} holds {int(df[c].isna().sum())} missing value(s); "
                            "clean or impute them first")
        x = pd.to_numeric(df[c], errors="coerce")
        if x.isna().any():
            raise DataError(f"algorithm='mdav' needs numeric quasi-identifiers; column {c!r} "
                            f"holds non-numeric values such as {df[c][x.isna()].iloc[0]!r}")
        values.append(x.to_numpy(dtype=np.float64))
    X = np.stack(values, axis=1)
    Z = standardize(X)
    groups = mdav(Z, k)
    counts = np.bincount(groups)
    released = df.copy()
    for j, c in enumerate(qis):
        released[c] = (np.bincount(groups, weights=X[:, j]) / counts)[groups]
    return _released_result(df, released, list(qis), sensitive, models, "mdav",
                            risk_threshold, {"information_loss": information_loss(Z, groups),
                                             "groups": int(counts.size)})


def _anatomy(df, qis, sensitive, models, *, risk_threshold, rng, **_):
    if sensitive is None:
        raise ConfigError("algorithm='anatomy' needs sensitive=<column>")
    if len(models) != 1 or not isinstance(models[0], LDiversity):
        raise ConfigError("algorithm='anatomy' takes exactly one model, LDiversity(l): its "
                          "groups hold l distinct sensitive values each")
    domain = _domain(df, sensitive, models)
    groups = anatomy_groups(domain.codes, models[0].l, rng=rng)
    qit = df.drop(columns=[sensitive]).copy()
    qit["group"] = groups
    st = (pd.DataFrame({"group": groups, sensitive: df[sensitive].to_numpy()})
          .groupby(["group", sensitive], sort=True).size().rename("count").reset_index())
    counts = np.bincount(groups)
    hist = np.zeros((counts.size, domain.size), dtype=np.int64)
    np.add.at(hist, (groups, domain.codes), 1)
    # anatomy hides which sensitive value belongs to whom, not who is in the table: the
    # re-identification risk is that of the exact quasi-identifiers it publishes.
    metrics = _privacy_metrics(_report(counts, hist, domain, models),
                               class_ids(df, list(qis))[1], risk_threshold)
    metrics.update(groups=int(counts.size))
    classes = pd.DataFrame({"group": np.arange(counts.size), "size": counts})
    return AnonymizationResult(qit, "anatomy", tuple(qis), sensitive, tuple(models), classes,
                               metrics, sensitive_table=st)
