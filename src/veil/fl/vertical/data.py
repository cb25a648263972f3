"""Vertically split tables: FATE's examples (``../shared/datasets/fate/``, README there) and
UCI Adult split by attributes between parties with partially overlapping ids."""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil._validation import check_choice, check_int
from veil.datasets import encode_adult, load_adult, locate, partition
from veil.errors import DataError
from veil.random import RngLike, check_rng

__all__ = ["FATE_TABLES", "load_fate", "vertical_adult"]

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


def vertical_adult(parties: int = 3, *, overlap: float = 0.8, rows: int | None = None,
                   label: str = "y", path: str | None = None, rng: RngLike = None
                   ) -> dict[str, pd.DataFrame]:
    """UCI Adult's training split, encoded (:func:`veil.datasets.encode_adult`), split by
    attribute between ``parties`` (``guest`` with the label ``label``, then ``host1``...):
    the attributes are dealt round-robin in a random order, each with all its one-hot
    columns, and every party holds the rows of a random subset of the people
    (:func:`veil.datasets.partition.vertical`: a fraction ``overlap`` held by all). Each
    table has a string ``id`` column (``adult-<row>``), in its own random row order.
    ``rows``: use the first ``rows`` records only (None: all 30,162)."""
    parties = check_int(parties, "parties", low=2)
    rng = check_rng(rng)
    data = encode_adult(load_adult("train", path=path))
    n = data.y.size if rows is None else min(check_int(rows, "rows", low=1), data.y.size)
    table = pd.DataFrame(data.X[:n], columns=data.feature_names)
    table[label] = data.y[:n]
    attributes = list(dict.fromkeys(c.split("=")[0] for c in data.feature_names))
    order = rng.permutation(len(attributes))
    groups = [[c for j in order[i::parties] for c in data.feature_names
               if c.split("=")[0] == attributes[j]] for i in range(parties)]
    parts = partition.vertical(table, parties, label=label, columns=groups, overlap=overlap,
                               rng=rng)
    names = ["guest", *(f"host{k}" for k in range(1, parties))]
    out = {}
    for name, part in zip(names, parts):
        part = part.iloc[rng.permutation(len(part))]
        out[name] = part.reset_index(names="row").assign(
            row=lambda t: np.char.add("adult-", t["row"].to_numpy().astype(str))
        ).rename(columns={"row": "id"})
    return out
