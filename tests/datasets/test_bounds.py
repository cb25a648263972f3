"""Declared public feature bounds (issue 32): features scaled into [-1, 1] from bounds given
before the data is seen, values outside clipped with a logged count, values far outside refused."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from veil.datasets import FeatureBounds, load_xy, public_bounds
from veil.errors import ConfigError, DataError
from veil.learn.model_format import encode_table


def test_scaling_maps_each_feature_from_its_bounds_into_unit_range():
    bounds = FeatureBounds([(0, 10), (-5, 5)], names=["a", "b"])
    X = np.array([[0.0, -5.0], [10.0, 5.0], [2.5, 0.0]])
    np.testing.assert_allclose(bounds.scale(X), [[-1, -1], [1, 1], [-0.5, 0]])


def test_the_saved_encoding_applies_the_same_map_to_a_raw_table():
    import pandas as pd

    bounds = FeatureBounds([(0, 10), (-5, 5)], names=["a", "b"])
    X = np.array([[1.0, -4.0], [9.0, 6.0], [3.0, 2.0]])        # 6.0 is clipped
    table = pd.DataFrame(X, columns=["a", "b"])
    np.testing.assert_allclose(encode_table(table, bounds.encoding()), bounds.scale(X))


def test_values_slightly_outside_are_clipped_with_a_count_per_feature(caplog):
    bounds = FeatureBounds([(0, 10), (0, 1)], names=["age", "score"])
    X = np.array([[-1.0, 0.5], [12.0, 0.5], [5.0, 1.2]])
    with caplog.at_level(logging.WARNING, logger="veil.datasets.bounds"):
        Z = bounds.scale(X, "records")
    assert Z.min() == -1.0 and Z.max() == 1.0
    assert "'age': 2" in caplog.text and "'score': 1" in caplog.text


def test_values_far_outside_are_refused_naming_the_feature_not_the_value():
    """Raw breast-cancer areas (hundreds to thousands) against bounds meant for
    standardised values: clipping would flatten the feature to a constant, so it is refused."""
    data = load_xy("breast_cancer")
    bounds = FeatureBounds([(-3, 3)] * 30, names=data.feature_names)
    with pytest.raises(ConfigError, match=r"feature 'mean radius' \(and \d+ other") as info:
        bounds.scale(data.X)
    assert "2501" not in str(info.value) and "[-3, 3]" in str(info.value)
    FeatureBounds([(0, 1)], tolerance=1.0).scale([[1.9]])      # within the tolerance


@pytest.mark.parametrize("bounds, match", [
    ([], "one \\[low, high\\] pair per feature"), ("0,1", "one \\[low, high\\]"),
    ([(1, 0)], r"bounds\[0\]"), ([(0, float("inf"))], r"bounds\[0\]"),
    ([(0, 1), (0,)], r"bounds\[1\]")])
def test_bad_bounds_are_refused_by_name(bounds, match):
    with pytest.raises(ConfigError, match=match):
        FeatureBounds(bounds)


def test_a_table_of_another_width_or_with_nan_is_refused():
    bounds = FeatureBounds([(0, 1), (0, 1)])
    with pytest.raises(ConfigError, match="declares 2 features but X has 3"):
        bounds.scale(np.zeros((2, 3)))
    with pytest.raises(DataError):
        bounds.scale([[np.nan, 0.0]])


@pytest.mark.parametrize("name", ["breast_cancer", "wine", "digits"])
def test_the_documented_bounds_hold_every_published_record(name, caplog):
    data = load_xy(name)
    bounds = public_bounds(name)
    assert bounds.names == data.feature_names
    with caplog.at_level(logging.WARNING, logger="veil.datasets.bounds"):
        Z = bounds.scale(data.X)
    assert caplog.text == ""                                    # nothing clipped
    assert Z.min() >= -1 and Z.max() <= 1
    if name != "digits":   # (digits' corner pixels are always 0)
        # every feature keeps its spread: rounding the ranges outward costs little
        assert (Z.max(axis=0) - Z.min(axis=0)).min() > 1.6


def test_encoded_sets_need_no_bounds_and_unknown_sets_are_refused():
    assert public_bounds("adult") is None and public_bounds("nursery") is None
    with pytest.raises(ConfigError, match="name='diabetes' is not allowed"):
        public_bounds("diabetes")
