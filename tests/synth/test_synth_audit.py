"""Black-box audit of a tiny fit on neighbouring tables (add/remove one row).

Attack: the target is one row ``(1, 1)`` added to a table whose other rows are all
``(0, 0)`` (the most distinguishable neighbour for a marginal-based synthesizer). Each
trial fits a synthesizer on the table with the target (member) or without it (non-member)
and scores the synthetic table by how many of its rows have the target's first value.
:func:`veil.audit.epsilon_lower_bound` turns the scores into an empirical lower bound on
epsilon (Clopper-Pearson, threshold chosen on half the trials): it must stay below the
certificate, and the same audit must catch a fit whose noise is far too small (so the
check can fail).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.audit.epsilon import epsilon_lower_bound
from veil.synth import MST, Independent, Schema

SCHEMA = Schema.from_dict({"a": {"type": "categorical", "categories": [0, 1]},
                           "b": {"type": "categorical", "categories": [0, 1]}})
BASE = pd.DataFrame({"a": [0] * 40, "b": [0] * 40})
TARGET = pd.DataFrame({"a": [1], "b": [1]})
DELTA = 1e-6


def _scores(method, epsilon: float, member: bool, trials: int, seed: int) -> np.ndarray:
    data = pd.concat([BASE, TARGET], ignore_index=True) if member else BASE
    out = []
    for t in range(trials):
        synth = method(SCHEMA, epsilon=epsilon, delta=DELTA, iters=20, rng=seed + t)
        out.append(float((synth.fit(data).sample(200)["a"] == 1).sum()))
    return np.array(out)


@pytest.mark.parametrize("method", [Independent, pytest.param(MST, marks=pytest.mark.slow)])
def test_the_empirical_epsilon_stays_below_the_certificate(method):
    epsilon = 1.0
    bound = epsilon_lower_bound(_scores(method, epsilon, True, 100, 0),
                                _scores(method, epsilon, False, 100, 10_000),
                                delta=DELTA, rng=5)
    assert bound.epsilon <= epsilon


def test_the_audit_catches_a_fit_with_far_too_little_noise():
    bound = epsilon_lower_bound(_scores(Independent, 300.0, True, 60, 0),
                                _scores(Independent, 300.0, False, 60, 10_000),
                                delta=DELTA, rng=5)
    assert bound.epsilon > 1.0
