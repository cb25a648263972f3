"""The optimal search: ARX's optimum on Adult, and exactness against exhaustive search."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from veil.anon import Hierarchy, KAnonymity, LDiversity, TCloseness, anonymize, check
from veil.anon.encoding import SensitiveDomain
from veil.anon.metrics import (
    discernibility,
    generalization_loss,
    nonuniform_entropy,
)
from veil.errors import ConfigError, DataError

ADULT_QIS = ["sex", "age", "race", "marital-status", "education", "native-country",
             "workclass", "salary-class"]


def test_arx_optimum_on_adult(adult):
    df, hierarchies = adult
    original = df.copy()
    result = anonymize(df, hierarchies, "occupation", [KAnonymity(5)], metric="entropy")
    assert result.levels == {"sex": 1, "age": 1, "race": 1, "marital-status": 1,
                             "education": 3, "native-country": 2, "workclass": 2,
                             "salary-class": 1}
    # ARX 3.x (Flash, non-uniform entropy, 0% suppression): 324620.5269918692
    assert result.metrics["entropy"] == 324620.5269918692
    assert result.metrics["discernibility"] == 55_170_356
    assert result.metrics["classes"] == 30 and len(result.classes) == 30
    assert result.metrics["k"] == 16 and result.classes["size"].min() == 16
    assert result.suppressed == 0
    # the search checks a small part of the lattice
    assert result.search["nodes"] == 4320 and result.search["checked"] < 200
    pd.testing.assert_frame_equal(df, original)
    # the released table agrees with the reported figures
    released = result.table
    assert check(released, ADULT_QIS).k == 16
    assert discernibility(released, ADULT_QIS) == 55_170_356
    # summing in another order moves the 10-decimal truncation by at most one unit
    assert nonuniform_entropy(df, released, ADULT_QIS) == pytest.approx(324620.5269918692,
                                                                         abs=1e-9)
    assert released["occupation"].equals(df["occupation"])


def test_adult_dm_star_optimum_is_the_same_node(adult):
    df, hierarchies = adult
    result = anonymize(df, hierarchies, models=[KAnonymity(5)], metric="discernibility")
    assert result.metrics["discernibility"] == 55_170_356
    assert list(result.levels.values()) == [1, 1, 1, 1, 3, 2, 2, 1]


def test_adult_with_suppression_checks_few_nodes(adult):
    """Under suppression most nodes that could beat the best are non-anonymous: the search
    settles them by checking the top of each promising path (361 checks before)."""
    df, hierarchies = adult
    result = anonymize(df, hierarchies, "occupation", [KAnonymity(5)], suppression_limit=0.04)
    assert list(result.levels.values()) == [0, 0, 1, 1, 2, 2, 2, 0]
    assert result.metrics["entropy"] == pytest.approx(180132.4084824471, abs=1e-6)
    assert 0 < result.suppressed <= 0.04 * len(df)
    assert result.search["checked"] <= 260


# -- exhaustive search on small tables ---------------------------------------------------
def _exhaustive(df, hierarchies, sensitive, models, limit, metric, monotonic=False):
    """Evaluate every transformation directly from the rows (no roll-up, no pruning).

    ``monotonic``: ARX's monotonic entropy / DM*, suppressed records costed as if kept."""
    qis = list(hierarchies)
    n = len(df)
    domain = SensitiveDomain(sensitive, df[sensitive])
    for m in models:
        m.bind(domain)
    labels = {(c, lv): h.generalize(df[c], lv) for c, h in hierarchies.items()
              for lv in range(h.n_levels)}
    codes = {key: pd.factorize(pd.Series(v))[0] for key, v in labels.items()}
    best = (math.inf, 0, None)
    for levels in itertools.product(*[range(h.n_levels) for h in hierarchies.values()]):
        key = np.zeros(n, dtype=np.int64)
        for c, lv in zip(qis, levels):
            key = key * (n + 1) + codes[(c, lv)]
        ids, sizes = np.unique(key, return_inverse=True, return_counts=True)[1:]
        ids = ids.ravel()
        hist = np.zeros((sizes.size, domain.size), dtype=np.int64)
        np.add.at(hist, (ids, domain.codes), 1)
        kept = np.ones(sizes.size, dtype=bool)
        for m in models:
            kept &= m.satisfied(sizes, hist, domain)
        gone = ~kept[ids]
        s = int(gone.sum())
        if s > math.floor(limit * n + 1e-9):
            continue
        if metric == "entropy":
            loss = 0.0
            for c, lv in zip(qis, levels):
                g = codes[(c, lv)]
                a = df[c].map(df[c].value_counts()).to_numpy()
                b = np.bincount(g)[g]
                value = -np.sum(np.log2(a / b))
                if s and not monotonic:
                    cg = np.bincount(g[gone])
                    cg = cg[cg > 0]
                    value -= np.sum(cg * np.log2(cg / s))
                loss += math.floor(value * 1e10) / 1e10
        elif metric == "discernibility" and monotonic:
            loss = float(np.sum(sizes ** 2))
        elif metric == "discernibility":
            loss = float(np.sum(sizes[kept] ** 2) + s * n)
        elif metric == "aecs":
            loss = n / (kept.sum() + (s > 0))
        elif metric == "loss":
            # label coverage before suppression; a suppressed cell costs 1
            cells = []
            for c, lv in zip(qis, levels):
                x = pd.to_numeric(df[c], errors="coerce")
                frame = pd.DataFrame({"g": labels[(c, lv)], "x": df[c], "v": x})
                if x.notna().all():
                    grouped = frame.groupby("g")["v"]
                    cost = (grouped.transform("max") - grouped.transform("min")) / (
                        x.max() - x.min())
                else:
                    cost = (frame.groupby("g")["x"].transform("nunique") - 1) / (
                        df[c].nunique() - 1)
                cells.append(np.where(gone, 1.0, cost.to_numpy()))
            loss = float(np.mean(cells))
            if s == 0:   # then it is the loss of the released table
                released = pd.DataFrame({c: labels[(c, lv)] for c, lv in zip(qis, levels)})
                assert generalization_loss(df[qis], released, qis) == pytest.approx(loss)
        else:
            heights = np.array([h.height for h in hierarchies.values()])
            share = np.array(levels) / heights
            loss = float(np.mean((1 - s / n) * share + s / n))
        key = (loss, sum(levels))
        if key < best[:2]:
            best = (loss, sum(levels), levels)
    return best


CASES = [
    ([KAnonymity(3)], 0.0, "entropy"),
    ([KAnonymity(10)], 0.0, "discernibility"),
    ([KAnonymity(5)], 0.0, "loss"),
    ([KAnonymity(5)], 0.0, "precision"),
    ([KAnonymity(4)], 0.0, "aecs"),
    ([KAnonymity(5)], 0.05, "entropy"),
    ([KAnonymity(8)], 0.03, "discernibility"),
    ([KAnonymity(3), LDiversity(2)], 0.0, "entropy"),
    ([KAnonymity(3), LDiversity(2, "entropy")], 0.04, "entropy"),
    ([KAnonymity(2), LDiversity(2, "recursive", c=3)], 0.02, "discernibility"),
    ([KAnonymity(2), TCloseness(0.3)], 0.0, "entropy"),
    ([KAnonymity(2), TCloseness(0.35)], 0.05, "loss"),
    # suppression with the bounds of the suppressed records (entropy, DM*), forced
    # suppression of entropy-l / t-closeness classes and the non-monotone models
    ([KAnonymity(4)], 0.08, "discernibility"),
    ([KAnonymity(3), LDiversity(2, "entropy")], 0.06, "discernibility"),
    ([KAnonymity(3), LDiversity(3, "entropy")], 0.1, "entropy"),
    ([KAnonymity(2), TCloseness(0.25)], 0.08, "entropy"),
    ([KAnonymity(3), TCloseness(0.3)], 0.05, "discernibility"),
    ([KAnonymity(6)], 0.04, "aecs"),
    ([KAnonymity(5)], 0.04, "precision"),
]


@pytest.mark.parametrize(("models", "limit", "metric"), CASES)
def test_search_is_exact(make_table, models, limit, metric):
    df, hierarchies = make_table(n=300, seed=11)
    result = anonymize(df, hierarchies, "disease", models, suppression_limit=limit,
                       metric=metric)
    loss, height, levels = _exhaustive(df, hierarchies, "disease", models, limit, metric)
    reported = result.metrics[metric]
    if metric == "precision":
        reported = 1 - reported
    assert reported == pytest.approx(loss, rel=1e-12, abs=1e-9)
    assert sum(result.levels.values()) == height
    assert result.suppressed <= math.floor(limit * len(df) + 1e-9)
    qis = list(hierarchies)
    kept = result.table
    if result.suppressed:
        kept = kept[~(kept[qis] == "*").all(axis=1)]
    report = check(kept, qis, "disease")
    assert report.k >= max(m.k for m in models if isinstance(m, KAnonymity))


@pytest.mark.parametrize("metric", ["entropy", "discernibility"])
@pytest.mark.parametrize(("models", "limit"), [([KAnonymity(5)], 0.05),
                                               ([KAnonymity(3), TCloseness(0.3)], 0.04)])
def test_monotonic_variants_are_exact(make_table, models, limit, metric):
    df, hierarchies = make_table(n=300, seed=11)
    result = anonymize(df, hierarchies, "disease", models, suppression_limit=limit,
                       metric=metric, monotonic=True)
    loss, height, _ = _exhaustive(df, hierarchies, "disease", models, limit, metric,
                                  monotonic=True)
    assert result.metrics[metric] == pytest.approx(loss, rel=1e-12, abs=1e-9)
    assert sum(result.levels.values()) == height


def test_arx_monotonic_entropy_with_suppression(adult):
    """ARX's TestAnonymizationKAnonymity: all 9 attributes quasi-identifiers, 5-anonymity,
    4% suppression, ``Metric.createEntropyMetric(true)`` (monotonic): 255559.85455731067
    at [1,0,1,1,3,2,2,0,1]; k=100: 379417.3460570988. veil's default (ARX's
    non-monotonic variant) charges suppressed records their entropy: 264971.58."""
    from veil.datasets import load_adult_hierarchies

    df, hierarchies = adult
    qis = ["sex", "age", "race", "marital-status", "education", "native-country",
           "workclass", "occupation", "salary-class"]
    frames = load_adult_hierarchies()
    all_qis = {c: hierarchies.get(c) or Hierarchy(frames[c], name=c) for c in qis}
    mono = anonymize(df, all_qis, None, [KAnonymity(5)], suppression_limit=0.04,
                     monotonic=True)
    assert mono.metrics["entropy"] == 255559.85455731067
    assert list(mono.levels.values()) == [1, 0, 1, 1, 3, 2, 2, 0, 1]
    assert 0 < mono.suppressed <= 0.04 * len(df)
    strict = anonymize(df, all_qis, None, [KAnonymity(100)], suppression_limit=0.04,
                       monotonic=True)
    assert strict.metrics["entropy"] == 379417.3460570988
    assert list(strict.levels.values()) == [1, 1, 1, 1, 3, 2, 2, 1, 1]
    plain = anonymize(df, all_qis, None, [KAnonymity(5)], suppression_limit=0.04)
    assert plain.metrics["entropy"] == pytest.approx(264971.5825580817, abs=1e-6)
    with pytest.raises(ConfigError, match="monotonic=True is not allowed with "
                                          "metric='loss'"):
        anonymize(df, all_qis, None, [KAnonymity(5)], metric="loss", monotonic=True)


# Tables evicted (keep only the newest); roll-ups that lift every column alone and group keys
# by sorting: the same optimum as the default (cache, one block, a slot per key).
_EVICTED = {"veil.anon.lattice.CACHE_ROWS": 1}
_BLOCKS = {"veil.anon.encoding._BLOCK_LIMIT": 1, "veil.anon.encoding._SLOT_LIMIT": 1}


@pytest.mark.parametrize(("patches", "case"), [(_EVICTED, 0), (_EVICTED, 8), (_EVICTED, 11),
                                               (_BLOCKS, 5), (_BLOCKS, 8), (_BLOCKS, 15)])
def test_search_is_exact_with_evicted_tables_column_blocks_and_sorted_keys(
        make_table, monkeypatch, patches, case):
    for name, value in patches.items():
        monkeypatch.setattr(name, value)
    models, limit, metric = CASES[case]
    df, hierarchies = make_table(n=300, seed=11)
    result = anonymize(df, hierarchies, "disease", models, suppression_limit=limit,
                       metric=metric)
    loss, height, _ = _exhaustive(df, hierarchies, "disease", models, limit, metric)
    assert result.metrics[metric] == pytest.approx(loss, rel=1e-12, abs=1e-9)
    assert sum(result.levels.values()) == height


def test_unsatisfiable_reports_the_best_achievable(make_table):
    df, hierarchies = make_table(n=60, seed=1)
    women = int((df["sex"] == "F").sum())
    hierarchies["sex"] = Hierarchy([["M"], ["F"]], name="sex")    # never generalized
    with pytest.raises(DataError) as info:
        anonymize(df, hierarchies, "disease", [KAnonymity(women + 1)])
    message = str(info.value)
    assert "cannot be met within suppression_limit=0" in message
    assert f"k={women}" in message
    assert f"Raise suppression_limit to at least {women / 60:.4g}" in message


def test_impossible_models_say_so(make_table):
    """k above the records or l above the distinct values: no advice to suppress."""
    df, hierarchies = make_table(n=60, seed=1)
    for algorithm in ("optimal", "mondrian", "mdav"):
        qis = hierarchies if algorithm == "optimal" else ["age"]
        with pytest.raises(DataError, match="61-anonymity is impossible: the table has only "
                                            "60 records"):
            anonymize(df, qis, "disease", [KAnonymity(61)], algorithm=algorithm)
    with pytest.raises(DataError, match="distinct 7-diversity is impossible: sensitive column "
                                        "'disease' holds only 6 distinct values"):
        anonymize(df, hierarchies, "disease", [KAnonymity(2), LDiversity(7)])
    # every record violates entropy 6-diversity even in one class: suppression cannot help
    with pytest.raises(DataError) as info:
        anonymize(df, hierarchies, "disease", [LDiversity(6, "entropy")],
                  suppression_limit=0.5)
    message = str(info.value)
    assert "No suppression limit can help" in message and "at least 1" not in message


def test_suppression_is_used_within_the_limit(make_table):
    df, hierarchies = make_table(n=300, seed=5)
    strict = anonymize(df, hierarchies, "disease", [KAnonymity(10)])
    loose = anonymize(df, hierarchies, "disease", [KAnonymity(10)], suppression_limit=0.1)
    assert strict.suppressed == 0
    assert 0 < loose.suppressed <= 30
    assert loose.metrics["entropy"] <= strict.metrics["entropy"]
    gone = (loose.table[list(hierarchies)] == "*").all(axis=1)
    assert gone.sum() == loose.suppressed
    assert loose.table.loc[gone, "disease"].equals(df.loc[gone, "disease"])
