"""Split-learning tests: one torch thread (small networks, a shared 2-core machine)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here with one torch thread (tests/conftest.py)."""


@pytest.fixture()
def fate_or_skip():
    """The path of FATE's breast guest table (skips when ../shared/datasets/fate is absent)."""
    from pathlib import Path

    from veil.datasets import locate

    found = locate("fate/breast_hetero_guest.csv")
    if found is None:
        pytest.skip("FATE's tables are not in ../shared/datasets/fate")
    return Path(found)


@pytest.fixture(scope="module")
def ftl_split():
    """Breast cancer for secure FTL: A has columns 0-14 of rows 0-349 with labels, B columns
    15-29 of rows 150-568; rows 150-349 are in both (the overlap): (XA, yA, XB, the overlap's
    rows in A, in B, the labels of B's own rows 350-568)."""
    import numpy as np
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    return X[:350, :15], y[:350], X[150:, 15:], np.arange(150, 350), np.arange(200), y[350:]
