"""Shared test set-up: tests never download, and data-set tests skip when files are absent."""

from __future__ import annotations

import os

import pytest

os.environ["VEIL_NO_DOWNLOAD"] = "1"


def _require(*relpaths: str):
    from veil.datasets.files import locate

    missing = [p for p in relpaths if locate(p) is None]
    if missing:
        pytest.skip(f"needs ../shared/datasets (or VEIL_DATA) with {', '.join(missing)}")


@pytest.fixture
def adult_available():
    _require("adult/adult.csv", "adult/adult.data", "adult/adult.test")


@pytest.fixture
def nursery_available():
    _require("nursery/nursery.data")


@pytest.fixture
def one_torch_thread():
    """Tiny networks: torch's intra-op threads only contend on the shared 2-core machine."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
