"""The fit report (veil.synth.report): self-contained HTML, one chart per column, the
two-way marginals the synthesizer got most wrong, and the not-private warning."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from veil.errors import ConfigError
from veil.synth import Independent, Schema
from veil.synth.report import NOT_PRIVATE, fit_report

SCHEMA = Schema.from_dict({
    "a": {"type": "categorical", "categories": ["x", "y", "z"]},
    "b": {"type": "categorical", "categories": ["x", "y", "z"]},
    "c": {"type": "numeric", "edges": [0, 10, 20], "integer": True},
})


def _table(n: int = 2000) -> pd.DataFrame:
    """b copies a (a strong pair), c is independent of both."""
    g = np.random.default_rng(0)
    a = np.array(["x", "y", "z"])[g.integers(0, 3, n)]
    return pd.DataFrame({"a": a, "b": a, "c": g.integers(0, 20, n)})


def _page(pairs: int = 1) -> str:
    real = _table()
    synth = Independent(SCHEMA, epsilon=20.0, delta=1e-6, rng=1).fit(real)
    return fit_report(synth, real, synth.sample(len(real)), pairs=pairs)


def test_the_report_is_self_contained_with_one_chart_per_column():
    page = _page()
    assert page.count("class='one-way'") == len(SCHEMA.names)
    assert page.count("src='data:image/png;base64,") == len(SCHEMA.names) + 1
    text = re.sub(r"base64,[A-Za-z0-9+/=]+", "", page)   # no asset fetched from anywhere
    assert "http" not in text and "<script" not in text and "<link" not in text
    assert NOT_PRIVATE in page.replace("&#x27;", "'")
    assert "SEEDED" in page and "adding or removing one row" in page


def test_the_two_way_charts_are_the_pairs_with_the_largest_error():
    """Independent one-way marginals cannot hold b = a: (a, b) is the pair it gets most
    wrong, and the one the report shows first (alone with pairs=1)."""
    page = _page(pairs=1)
    assert re.findall(r"<figcaption>(\w+) x (\w+): two-way", page) == [("a", "b")]
    assert "the 1 of 3 column pairs" in page.lower()


def test_an_unfitted_synthesizer_has_no_report():
    with pytest.raises(ConfigError, match="not fitted"):
        fit_report(Independent(SCHEMA, epsilon=1.0, delta=1e-6), _table(), _table())
