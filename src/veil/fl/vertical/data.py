"""FATE's vertically split example tables (``../shared/datasets/fate/``, README there)."""

from __future__ import annotations

import pandas as pd

from veil._validation import check_choice
from veil.datasets import locate
from veil.errors import DataError

__all__ = ["FATE_TABLES", "load_fate"]

FATE_TABLES = ("breast", "default_credit")


def load_fate(name: str, path: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(guest, host)`` tables of FATE's ``name`` example: the guest has ``id``, ``y`` and
    its features, the host ``id`` and its features (not aligned: align them by ``id``)."""
    check_choice(name, "name", FATE_TABLES)
    tables = []
    for role in ("guest", "host"):
        relpath = f"fate/{name}_hetero_{role}.csv"
        found = locate(relpath, path)
        if found is None:
            raise DataError(f"{relpath} was not found beside the checkout, in VEIL_DATA or in "
                            f"path={path!r}")
        tables.append(pd.read_csv(found))
    return tables[0], tables[1]
