import math

import numpy as np
import pytest

from veil._validation import (
    check_array,
    check_bounds,
    check_categories,
    check_delta,
    check_epsilon,
    check_int,
    check_pair,
    check_probability,
)
from veil.errors import ConfigError, DataError


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "1", True])
def test_epsilon_rejected_with_name_and_value(bad):
    with pytest.raises(ConfigError, match=r"epsilon=.* is not allowed"):
        check_epsilon(bad)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2])
def test_delta_range(bad):
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        check_delta(bad)
    assert check_delta(0) == 0.0


def test_bounds_and_ints_and_probabilities():
    assert check_bounds((0, 1)) == (0.0, 1.0)
    for bad in [(1, 0), (0, math.inf), (1,), "ab"]:
        with pytest.raises(ConfigError, match="bounds"):
            check_bounds(bad)
    assert check_int(3, "steps", low=1) == 3
    with pytest.raises(ConfigError, match=r"steps=0 .*\[1, inf\]"):
        check_int(0, "steps", low=1)
    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        check_probability(0.0, "q", low_open=True)


def test_array_rejects_non_finite_and_non_numeric():
    assert check_array([1, 2]).dtype == np.float64
    with pytest.raises(DataError, match="1 NaN"):
        check_array([1.0, float("nan")], "values")
    with pytest.raises(DataError, match="not numeric"):
        check_array(["a"], "values")
    with pytest.raises(DataError, match="empty"):
        check_array([], "values")


def test_fitted_and_feature_checks():
    from veil._validation import check_features, check_fitted

    class Model:
        pass

    with pytest.raises(ConfigError, match="this Model is not fitted"):
        check_fitted(Model(), "coef_")
    assert check_features([[1, 2]], 2).shape == (1, 2)
    with pytest.raises(DataError, match="X has 3 features, but the model is expecting 2"):
        check_features([[1, 2, 3]], 2)


def test_pair_is_one_check_for_every_x_y():
    """Federation, the membership attacks and the hybrid aggregators each wrote the (X, y)
    check; one now, naming the argument."""
    X, y = check_pair(([[1, 2], [3, 4]], [0, 1]), "clients[2]")
    assert X.dtype == np.float64 and y.tolist() == [0, 1]
    codes, _ = check_pair((np.array([[1, 2]]), [0]), "parties[0]", dtype=None)
    assert codes.dtype.kind == "i"                      # a tree's codes keep their dtype
    with pytest.raises(DataError, match=r"clients\[2\] is not an \(X, y\) pair"):
        check_pair([[1, 2]], "clients[2]")
    with pytest.raises(DataError, match=r"members\[1\] has shape \(1,\); expected \(2,\)"):
        check_pair(([[1.0], [2.0]], [0]), "members")
    with pytest.raises(DataError, match="NaN"):
        check_pair(([[np.nan]], [0]), "test")


def test_categories_are_one_check_for_stats_and_queries():
    assert check_categories(["a", "b"]) == ("a", "b")
    for bad in ([], ["a", "a"]):
        with pytest.raises(ConfigError, match="need distinct categories"):
            check_categories(bad)
