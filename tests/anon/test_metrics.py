import math

import numpy as np
import pandas as pd
import pytest

from veil.anon import reidentification_risk
from veil.anon.metrics import (
    average_class_size,
    discernibility,
    generalization_loss,
    nonuniform_entropy,
)
from veil.errors import ConfigError

TABLE = pd.DataFrame({"zip": ["476**"] * 5 + ["479**"] * 4})


def test_class_based_metrics_by_hand():
    assert discernibility(TABLE, ["zip"]) == 25 + 16
    assert average_class_size(TABLE, ["zip"]) == 4.5
    risk = reidentification_risk(TABLE, ["zip"], threshold=0.2)
    assert risk.highest == 0.25 and risk.average == pytest.approx(2 / 9)
    assert risk.records_at_risk == pytest.approx(4 / 9)    # the class of 4: 1/4 > 0.2
    suppressed = pd.DataFrame({"zip": ["476**"] * 5 + ["*"] * 2})
    assert discernibility(suppressed, ["zip"]) == 25 + 2 * 7
    with pytest.raises(ConfigError, match="threshold"):
        reidentification_risk(TABLE, ["zip"], threshold=0)


def test_nonuniform_entropy_by_hand():
    original = pd.DataFrame({"x": ["a", "a", "b", "c"]})
    released = pd.DataFrame({"x": ["ab", "ab", "ab", "c"]})
    expected = 2 * -math.log2(2 / 3) - math.log2(1 / 3)
    assert nonuniform_entropy(original, released, ["x"]) == pytest.approx(expected, abs=1e-10)
    assert nonuniform_entropy(original, original, ["x"]) == 0


def test_generalization_loss_by_hand():
    original = pd.DataFrame({"n": [1, 2, 3, 5], "c": list("abcd")})
    released = pd.DataFrame({"n": ["L", "L", "H", "H"], "c": ["ab", "ab", "*", "d"]})
    # n: L covers 1..2 -> 1/4, H covers 3..5 -> 2/4; c: ab -> 1/3, * -> 1, d -> 0
    expected = (0.25 * 2 + 0.5 * 2 + 1 / 3 * 2 + 1 + 0) / 8
    assert generalization_loss(original, released, ["n", "c"]) == pytest.approx(expected)
    assert generalization_loss(original, original, ["n", "c"]) == 0
    assert np.isclose(generalization_loss(original, released.assign(n="*", c="*"),
                                          ["n", "c"]), 1.0)
