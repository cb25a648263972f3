"""MST, AIM and the independent baseline: accuracy, the one charge, refusals before it."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pandas as pd
import pytest
from dp_accounting import dp_event as de

from veil.dp import Ledger
from veil.dp.gaussian import zcdp_rho
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.learn.public import PublicFactWarning
from veil.random import Generator
from veil.synth import AIM, METHODS, MST, Independent, Schema, load_schema
from veil.synth.model import marginal_counts

SPEC = {
    "colour": {"type": "categorical", "categories": ["red", "green", "blue"]},
    "size": {"type": "categorical", "categories": ["S", "M", "L"]},
    "age": {"type": "numeric", "edges": [0, 30, 60, 100], "integer": True},
    "flag": {"type": "categorical", "categories": [0, 1]},
}
SCHEMA = Schema.from_dict(SPEC)


def _table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Colour drives size, size drives age, age drives the flag: a chain."""
    g = np.random.default_rng(seed)
    colour = g.integers(0, 3, n)
    size = np.where(g.random(n) < 0.8, colour, g.integers(0, 3, n))
    age_bin = np.where(g.random(n) < 0.7, size, g.integers(0, 3, n))
    age = np.array([0, 30, 60])[age_bin] + g.integers(0, 30, n)
    flag = (age_bin == 2) ^ (g.random(n) < 0.1)
    return pd.DataFrame({"colour": np.array(["red", "green", "blue"])[colour],
                         "size": np.array(["S", "M", "L"])[size], "age": age,
                         "flag": flag.astype(int)})


def _error(real: pd.DataFrame, synthetic: pd.DataFrame, way: int) -> float:
    a, b = SCHEMA.encode(real), SCHEMA.encode(synthetic)
    return max(np.abs(marginal_counts(a, SCHEMA.sizes, r) / len(a)
                      - marginal_counts(b, SCHEMA.sizes, r) / len(b)).sum()
               for r in itertools.combinations(range(4), way))


@pytest.mark.parametrize("method, way", [(MST, 2), (AIM, 3), (Independent, 1)])
def test_a_huge_budget_recovers_the_marginals_it_measures(method, way):
    data = _table()
    synth = method(SCHEMA, epsilon=100.0, delta=1e-6, iters=1500, rng=1).fit(data)
    synthetic = synth.sample()
    assert len(synthetic) == pytest.approx(len(data), abs=2)
    assert _error(data, synthetic, way if method is not MST else 1) < 0.03
    if method is MST:  # the chain is a spanning tree: MST finds it and fits it
        pairs = {m.attrs for m in synth.measurements_ if len(m.attrs) == 2}
        assert pairs == {(0, 1), (1, 2), (2, 3)}
        for pair in pairs:
            a, b = SCHEMA.encode(data), SCHEMA.encode(synthetic)
            assert np.abs(marginal_counts(a, SCHEMA.sizes, pair) / len(a)
                          - marginal_counts(b, SCHEMA.sizes, pair) / len(b)).sum() < 0.03


def test_the_output_has_the_declared_columns_and_dtypes():
    synthetic = MST(SCHEMA, epsilon=2.0, delta=1e-6, iters=50, rng=2).fit(_table()).sample(500)
    assert list(synthetic.columns) == list(SPEC)
    assert set(synthetic["colour"]) <= {"red", "green", "blue"}
    assert synthetic["age"].dtype == np.int64
    assert synthetic["age"].between(0, 100).all()
    assert set(synthetic["flag"]) <= {0, 1}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_ledger_is_charged_once_with_the_priced_cost(name):
    ledger = Ledger(2.0, 1e-6)
    synth = METHODS[name](SCHEMA, epsilon=1.0, delta=1e-7, iters=30, rng=3)
    priced = synth.cost()
    assert priced == de.ZCDpEvent(zcdp_rho(1.0, 1e-7))
    synth.fit(_table(500), ledger=ledger)
    (charge,) = ledger.history()
    assert charge.event == priced and charge.label == f"synth.{name}"
    assert charge.delta == 1e-7
    assert ledger.spent(1e-7)[0] <= 1.0 + 1e-9   # the conversion certifies (1, 1e-7) at most


@pytest.mark.parametrize("data, error, words", [
    (_table(50).assign(colour="purple"), DataError, "'colour'"),
    (_table(50).drop(columns="flag"), ConfigError, "['flag'] are missing from the data"),
    (_table(50).assign(extra=1), ConfigError, "['extra'] are missing from the schema"),
    (_table(50).assign(age=150), DataError, "'age'"),
    (_table(50).assign(size=None), DataError, "missing values"),
])
def test_bad_data_is_refused_by_name_before_anything_is_charged(data, error, words):
    ledger = Ledger(5.0, 1e-6)
    with pytest.raises(error) as info:
        AIM(SCHEMA, epsilon=1.0, delta=1e-7).fit(data, ledger=ledger)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert ledger.history() == ()


def test_a_budget_too_small_is_refused_before_the_first_measurement():
    ledger = Ledger(0.5, 1e-6)
    with pytest.raises(BudgetExceededError, match="one-way marginals"):
        MST(SCHEMA, epsilon=1.0, delta=1e-7).fit(_table(50), ledger=ledger)
    assert ledger.history() == ()


@pytest.mark.parametrize("spec, words", [
    ({"a": {"type": "text"}}, "type='text'"),
    ({"a": {"type": "categorical", "categories": ["x", "x"]}}, "distinct"),
    ({"a": {"type": "numeric", "edges": [3, 1]}}, "strictly increasing"),
    ({"a": {"type": "numeric", "edges": [0, 1], "bins": 3}}, "unknown keys ['bins']"),
])
def test_a_bad_schema_is_refused_by_name(spec, words):
    with pytest.raises(ConfigError) as info:
        Schema.from_dict(spec)
    assert words in str(info.value)


def test_settings_and_model_size_are_checked_before_the_charge():
    ledger = Ledger(5.0, 1e-6)
    with pytest.raises(ConfigError, match="max_cells=10"):
        MST(SCHEMA, epsilon=1.0, delta=1e-7, max_cells=10).fit(_table(50), ledger=ledger)
    with pytest.raises(ConfigError, match="workload entry"):
        AIM(SCHEMA, epsilon=1.0, delta=1e-7, workload=[("colour", "shoe")]).fit(
            _table(50), ledger=ledger)
    with pytest.raises(ConfigError, match="delta=0"):
        AIM(SCHEMA, epsilon=1.0, delta=0.0).fit(_table(50), ledger=ledger)
    assert ledger.history() == ()


def test_a_toml_schema_equals_the_python_one(tmp_path):
    path = tmp_path / "schema.toml"
    path.write_text('[columns.colour]\ntype = "categorical"\ncategories = ["red", "green", '
                    '"blue"]\n\n[columns.size]\ntype = "categorical"\ncategories = ["S", "M", '
                    '"L"]\n\n[columns.age]\ntype = "numeric"\nedges = [0, 30, 60, 100]\n'
                    'integer = true\n\n[columns.flag]\ntype = "categorical"\n'
                    'categories = [0, 1]\n')
    assert load_schema(path) == SCHEMA
    path.write_text("[columns.a\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_schema(path)


def test_reading_the_schema_from_the_data_is_an_opt_in_with_a_warning():
    with pytest.warns(PublicFactWarning, match="read from the data"):
        schema = Schema.from_data(_table(50), edges={"age": [0, 30, 60, 100]})
    assert schema.columns[0].categories == ("blue", "green", "red")


def test_a_seed_is_a_labelled_simulation_and_reproduces(caplog):
    with caplog.at_level(logging.WARNING, logger="veil.synth"):
        a = Independent(SCHEMA, epsilon=1.0, delta=1e-7, iters=20, rng=9).fit(_table(300))
    assert a.simulated_ and "not certified" in caplog.text
    b = Independent(SCHEMA, epsilon=1.0, delta=1e-7, iters=20, rng=9).fit(_table(300))
    pd.testing.assert_frame_equal(a.sample(100, rng=1), b.sample(100, rng=1))
    c = Independent(SCHEMA, epsilon=1.0, delta=1e-7, iters=20).fit(_table(300))
    assert not c.simulated_


def test_a_secure_generator_passed_in_is_not_a_simulation(caplog):
    """The conformance suite hands each fit ``veil.random.Generator()`` (OS-seeded, secure):
    that fit's epsilon is certified, so it must be neither labelled nor logged a simulation
    (before: any ``rng`` given was, 200 false warnings per conformance run)."""
    with caplog.at_level(logging.WARNING, logger="veil.synth"):
        fit = Independent(SCHEMA, epsilon=1.0, delta=1e-7, iters=20,
                          rng=Generator()).fit(_table(300))
    assert not fit.simulated_ and "not certified" not in caplog.text
