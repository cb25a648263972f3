"""veil.dp.query on pandas: bounding, partition selection, accounting, accuracy, bad input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtr

from veil.dp import Ledger
from veil.dp.accounting import make_accountant
from veil.dp.query import Query, local, parse_aggregate
from veil.dp.query.bounding import bound_rows
from veil.dp.query.release import QueryMechanism
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.random import Generator


def visits(n_units: int = 400, seed: int = 0) -> pd.DataFrame:
    """Each unit has 1-8 rows over wards a-e; ages in [0, 100] (a few outside)."""
    r = np.random.default_rng(seed)
    rows = r.integers(1, 9, n_units)
    unit = np.repeat(np.arange(n_units), rows)
    ward = r.choice(list("abcde"), unit.size, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    age = r.normal(50, 15, unit.size)
    return pd.DataFrame({"id": unit, "ward": ward, "age": age,
                         "sex": r.choice(["F", "M"], unit.size)})


def test_bounding_keeps_at_most_the_bounds_and_exactly_the_possible():
    r = np.random.default_rng(1)
    units = r.integers(0, 50, 3000)
    groups = r.integers(0, 12, 3000)
    rows, diag = bound_rows(units, groups, 12, 3, 2, Generator(5))
    kept = pd.DataFrame({"u": units[rows], "g": groups[rows]})
    per_pair = kept.groupby(["u", "g"]).size()
    assert per_pair.max() <= 2
    assert kept.groupby("u")["g"].nunique().max() <= 3
    # every unit keeps min(its groups, 3) groups and min(rows, 2) rows in each kept group
    full = pd.DataFrame({"u": units, "g": groups}).groupby(["u", "g"]).size()
    assert (kept.groupby("u")["g"].nunique()
            == full.groupby("u").size().clip(upper=3)).all()
    assert (per_pair == full.loc[per_pair.index].clip(upper=2)).all()
    dropped = 3000 - rows.size
    assert diag["rows_over_max_rows"] + diag["rows_over_max_groups"] == dropped
    assert diag["units_clipped"] == 50


def test_bounding_samples_groups_uniformly():
    # one unit with 4 groups, max_groups=1: each group kept about 1/4 of the time
    units = np.zeros(4, dtype=np.int64)
    groups = np.arange(4)
    gen = Generator(3)
    kept = [int(groups[bound_rows(units, groups, 4, 1, 1, gen)[0]][0]) for _ in range(4000)]
    freq = np.bincount(kept, minlength=4) / 4000
    assert np.all(np.abs(freq - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 4000))


def _subset_frequencies(draw, n_draws: int) -> np.ndarray:
    """Frequencies of the distinct outcomes (sorted tuples) of ``n_draws`` calls of draw."""
    outcomes = pd.Series([tuple(sorted(draw())) for _ in range(n_draws)])
    return outcomes.value_counts().to_numpy() / n_draws


def test_bounding_keeps_uniform_subsets_of_rows_and_of_groups():
    # the kept rows of an over-full (unit, group) and the kept groups of a crowded unit are
    # uniform subsets: 2 of 5 rows (10 subsets), 2 of 4 groups (6 subsets)
    gen = Generator(8)
    units, rows = np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.int64)
    freq = _subset_frequencies(lambda: bound_rows(units, rows, 1, 1, 2, gen)[0], 6000)
    assert freq.size == 10
    assert np.all(np.abs(freq - 0.1) < 5 * math.sqrt(0.1 * 0.9 / 6000))
    groups = np.arange(4)
    units = np.zeros(4, dtype=np.int64)
    freq = _subset_frequencies(lambda: groups[bound_rows(units, groups, 4, 2, 1, gen)[0]],
                               6000)
    assert freq.size == 6
    assert np.all(np.abs(freq - 1 / 6) < 5 * math.sqrt(5 / 36 / 6000))


def test_bounding_with_a_large_row_bound_keeps_each_row_equally_often():
    # max_rows=70 of 100 rows in one (unit, group): every row kept with probability 0.7
    gen = Generator(9)
    units, groups = np.zeros(100, dtype=np.int64), np.zeros(100, dtype=np.int64)
    kept = np.zeros(100)
    for _ in range(400):
        rows, diag = bound_rows(units, groups, 1, 1, 70, gen)
        assert rows.size == 70 and diag["rows_over_max_rows"] == 30
        kept[rows] += 1
    assert np.all(np.abs(kept / 400 - 0.7) < 5 * math.sqrt(0.21 / 400))


def lone_unit_table(partitions: int = 200) -> pd.DataFrame:
    """200 units in one common partition, and one more unit alone in ``partitions``."""
    return pd.DataFrame({"id": list(range(200)) + [10_000] * partitions,
                         "key": ["common"] * 200 + [f"lone{i}" for i in range(partitions)]})


def test_a_unit_alone_in_many_partitions_is_released_as_the_plan_allows():
    """Attack (issue 28 item 1): one privacy unit alone in 200 partitions, max_groups=1,
    epsilon 0.5, delta 1e-2. Bounding keeps one of its partitions; the threshold makes
    that one appear with probability at most p = 1 - (1 - delta/2)^(1/max_groups) = 0.005
    (plan.py). When candidates came from all rows before bounding, each of its other 199
    partitions was a candidate too (count 0, noised, thresholded): one of them appeared
    in ~44% of the runs, so the neighbouring table without the unit (where none can
    appear) was distinguishable far beyond delta (audit lower bound epsilon >= 2.3).
    Candidates now come only from the rows kept after bounding."""
    df = lone_unit_table()
    q = Query("id", max_groups=1, max_rows=1).group_by("key").count()
    plan = q.plan(epsilon=0.5, delta=1e-2)
    assert plan.selection_delta == 0.005
    measurements = q.measurements()
    mechanism = QueryMechanism(plan, measurements, q.aggregates)
    gen = Generator(11)
    trials, seen = 400, 0
    for _ in range(trials):
        totals = local.table_totals(df, "id", ("key",), None, measurements, max_groups=1,
                                    max_rows=1, rng=gen)
        released = mechanism._randomize(totals, gen)
        seen += bool(released.index.str.startswith("lone").any())
    # at most 0.005 per run: 2 expected of 400; P(Binomial(400, 0.005) > 10) < 1e-5
    assert seen <= 10, f"a lone unit's partition released in {seen} of {trials} runs"
    assert sorted(totals.keys["key"])[0] == "common" and totals.groups == 2


def test_plan_is_certified_and_is_what_the_ledger_charges():
    q = Query("id", max_groups=2, max_rows=3).group_by("ward").count().mean("age", (0, 100))
    plan = q.plan(1.0, 1e-6)
    assert plan.certified_epsilon <= 1.0 and plan.certified_epsilon > 0.99
    acc = make_accountant("pld")
    acc.compose(plan.event)
    assert acc.get_epsilon(1e-6) <= 1.0
    ledger = Ledger(5.0, 1e-6)
    q.run(visits(), epsilon=1.0, delta=1e-6, ledger=ledger, rng=2)
    (charge,) = ledger.history()
    assert charge.event == plan.event
    assert ledger.spent()[0] == pytest.approx(plan.certified_epsilon, rel=1e-9)


def test_joint_calibration_beats_splitting_the_budget():
    # two Gaussian parts calibrated together need less noise than (eps/2, delta/2) each
    q = Query("id").group_by("ward", keys=list("abcde")).count().sum("age", (0, 100))
    plan = q.plan(1.0, 1e-6)
    from veil.dp.gaussian import analytic_gaussian_sigma
    split = analytic_gaussian_sigma(0.5, 0.5e-6, 1.0)
    assert plan.parts[0].scale < 0.8 * split


def test_threshold_bounds_the_chance_of_a_new_group():
    q = Query("id", max_groups=4, max_rows=2).group_by("ward").count()
    plan = q.plan(1.0, 1e-5)
    count = plan.parts[0]
    p = 1.0 - float(ndtr((plan.threshold - count.grid / 2 - 2) / count.scale))
    assert 1.0 - (1.0 - p) ** 4 <= plan.selection_delta
    lap = q.plan(1.0, 1e-5, noise="laplace")
    b = lap.parts[0].scale
    p = 0.5 * math.exp(-(lap.threshold - lap.parts[0].grid / 2 - 2) / b)
    assert 1.0 - (1.0 - p) ** 4 <= lap.selection_delta


def test_partition_selection_releases_large_groups_only():
    df = visits(3000)
    lone = pd.DataFrame({"id": [10 ** 6] * 2, "ward": ["rare"] * 2, "age": [30.0, 31.0],
                         "sex": ["F", "F"]})
    q = Query("id", max_groups=2, max_rows=2).group_by("ward").count().mean("age", (0, 100))
    res = q.run(pd.concat([df, lone]), epsilon=2.0, delta=1e-6, rng=4)
    assert "rare" not in res.table.index
    assert {"a", "b"} <= set(res.table.index)
    assert list(res.table.columns) == ["count", "mean(age)"]


def test_public_keys_release_every_declared_key_and_drop_others():
    df = visits()
    q = Query("id", max_groups=5, max_rows=8).group_by("ward", keys=["a", "b", "zz"]).count()
    res = q.run(df, epsilon=1.0, rng=5)
    assert list(res.table.index) == ["a", "b", "zz"]
    assert res.diagnostics["rows_outside_keys"] == int((~df.ward.isin(["a", "b"])).sum())
    assert res.plan.noise == "laplace" and res.delta == 0.0


def test_accuracy_at_a_large_epsilon():
    df = visits(2000, seed=7)
    q = (Query("id", max_groups=5, max_rows=8).group_by("ward", keys=list("abcde"))
         .count().sum("age", (0, 100)).mean("age", (0, 100)).variance("age", (0, 100))
         .quantile("age", 0.5, (0, 100)).histogram("sex", categories=["F", "M"])
         .histogram("age", [0, 50, 100]))
    res = q.run(df, epsilon=50.0, delta=1e-6, rng=6)
    t = res.table
    clipped = df.assign(age=df.age.clip(0, 100))
    truth = clipped.groupby("ward")["age"].agg(["size", "sum", "mean", "var", "median"])
    stds = {p.name: p.scale for p in res.plan.parts}
    assert np.all(np.abs(t["count"] - truth["size"]) <= 6 * stds["count"] + 1)
    assert np.all(np.abs(t["sum(age)"] - truth["sum"]) <= 6 * stds["sum(age)"] + 1)
    assert np.all(np.abs(t["mean(age)"] - truth["mean"]) < 1.0)
    # the variance's error is about 6 sd of the noisy sum of squares over n
    sd_var = 6 * stds["sum((age - m)^2)"] / truth["size"] + 5.0
    assert np.all(np.abs(t["variance(age)"] - truth["var"]) < sd_var)
    assert np.all(np.abs(t["quantile(age, 0.5)"] - truth["median"]) < 3.0)
    sexes = clipped.groupby(["ward", "sex"]).size().unstack()
    assert np.all(np.abs(t["histogram(sex)[F]"] - sexes["F"]) <= 6 * stds["histogram(sex)"] + 1)
    assert res.diagnostics["outside:sum(age)"] == int(((df.age < 0) | (df.age > 100)).sum())


def test_seeded_runs_repeat_and_secure_runs_differ():
    q = Query("id", max_groups=2, max_rows=2).group_by("ward").count().sum("age", (0, 100))
    df = visits()
    a = q.run(df, epsilon=1.0, delta=1e-6, rng=9).table
    b = q.run(df, epsilon=1.0, delta=1e-6, rng=9).table
    c = q.run(df, epsilon=1.0, delta=1e-6).table
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_several_group_columns_and_the_text_form():
    df = visits()
    q = Query("id", max_groups=10, max_rows=8).group_by(
        "ward", "sex", keys=[(w, s) for w in "abcde" for s in "FM"]).agg(
        "count", "median(age, 0, 100)")
    res = q.run(df, epsilon=5.0, rng=3)
    assert res.table.index.names == ["ward", "sex"] and len(res.table) == 10
    assert parse_aggregate("quantile(age, 0.9, 0, 100)").q == 0.9
    assert parse_aggregate("histogram(sex, F, M)").categories == ("F", "M")
    assert parse_aggregate("histogram(age, 0, 10, 20)").edges == (0.0, 10.0, 20.0)


@pytest.mark.parametrize("text", ["mean(age, 100, 0)", "mean(age)", "avg(age, 0, 1)",
                                  "quantile(age, 2, 0, 1)", "histogram(age, 3, 1)", "x y"])
def test_bad_aggregates_are_config_errors(text):
    with pytest.raises(ConfigError):
        parse_aggregate(text)


def test_bad_input_charges_nothing():
    df = visits()
    ledger = Ledger(1.0, 1e-6)
    q = Query("id", max_groups=2, max_rows=2).group_by("ward").count()
    with pytest.raises(DataError, match="'patient'"):
        Query("patient").group_by("ward").count().run(df, epsilon=0.5, delta=1e-7,
                                                       ledger=ledger)
    nan_keys = df.assign(ward=df.ward.where(df.index % 50 != 0))
    with pytest.raises(DataError, match="missing values"):
        q.run(nan_keys, epsilon=0.5, delta=1e-7, ledger=ledger)
    with pytest.raises(DataError, match="missing values"):
        q.mean("age", (0, 100)).run(df.assign(age=np.nan), epsilon=0.5, delta=1e-7,
                                    ledger=ledger)
    with pytest.raises(ConfigError, match="bounds"):
        q.mean("age", (100, 0))
    with pytest.raises(ConfigError, match="partition selection"):
        q.run(df, epsilon=0.5, ledger=ledger)
    with pytest.raises(ConfigError, match="max_rows"):
        Query("id", max_rows=0)
    assert ledger.history() == ()
    q.run(df, epsilon=0.9, delta=1e-6, ledger=ledger, rng=1)
    with pytest.raises(BudgetExceededError):
        q.run(df, epsilon=0.9, delta=1e-6, ledger=ledger, rng=1)
    assert len(ledger.history()) == 1


def test_a_unit_over_the_bounds_is_clipped_not_refused():
    df = visits()
    heavy = pd.DataFrame({"id": [-1] * 500, "ward": ["a"] * 250 + ["b"] * 250,
                          "age": [99.0] * 500, "sex": ["M"] * 500})
    q = Query("id", max_groups=1, max_rows=2).group_by("ward", keys=list("abcde")).count()
    res = q.run(pd.concat([df, heavy]), epsilon=1.0, rng=2)
    assert res.diagnostics["rows_over_max_groups"] >= 250
    assert res.diagnostics["rows_over_max_rows"] >= 248


def test_pld_prices_a_record_exposed_with_probability_q_as_0_q():
    from dp_accounting import dp_event as de
    acc = make_accountant("pld")
    acc.compose(de.PoissonSampledDpEvent(1e-6, de.NonPrivateDpEvent()))
    assert acc.get_delta(0.0) == pytest.approx(1e-6)
    assert acc.get_epsilon(1e-6) == 0.0
    rdp = make_accountant("rdp")
    with pytest.raises(ConfigError):
        rdp.compose(de.PoissonSampledDpEvent(1e-6, de.NonPrivateDpEvent()))
