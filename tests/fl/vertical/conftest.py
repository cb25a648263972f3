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
