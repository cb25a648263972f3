"""Split-learning tests: one torch thread (small networks, a shared 2-core machine)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here with one torch thread (tests/conftest.py)."""
