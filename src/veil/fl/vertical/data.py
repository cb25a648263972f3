"""Vertically split tables: FATE's examples (``../shared/datasets/fate/``, README there) and
UCI Adult split by attributes between parties with partially overlapping ids; the checks a
set of party tables passes before a run (:func:`check_tables`), the held-out rows and the
AUC a run reports."""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil._validation import check_choice, check_int
from veil.datasets import encode_adult, load_adult, locate, partition
from veil.errors import ConfigError, DataError
from veil.fl.vertical.align import read_ids
from veil.random import RngLike, check_rng

__all__ = ["FATE_TABLES", "auc", "check_numeric", "check_tables", "held_out", "load_fate",
           "vertical_adult"]

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


def check_tables(tables: dict[str, pd.DataFrame], id_column: str, label: str) -> str:
    """Refuse tables that cannot be joined vertically; returns the label holder's name.

    Checks: every table has the id column (ids of one type, no duplicates, no missing
    ones); the label is in exactly one table; no other column is in two tables; every
    party holds at least one feature column, all numeric.
    """
    if len(tables) < 2:
        raise ConfigError(f"vertical learning needs at least two parties; got {list(tables)}")
    kinds = {}
    for name, table in tables.items():
        kinds[name] = read_ids(table, id_column, name=f"ids of {name!r}")[1]
    if len(set(kinds.values())) > 1:
        raise DataError(f"mismatched id types across parties: {kinds}; convert the "
                        f"{id_column!r} columns to one type")
    holders = [name for name, t in tables.items() if label in t.columns]
    if len(holders) != 1:
        raise ConfigError(f"the label {label!r} is held by {holders or 'no party'}; exactly "
                          "one party (the guest) must hold it")
    owner: dict[str, str] = {}
    for name, table in tables.items():
        for col in table.columns:
            if col in (id_column, label):
                continue
            if col in owner:
                raise ConfigError(f"column {col!r} is held by both {owner[col]!r} and "
                                  f"{name!r}: a vertical split gives each feature to one "
                                  "party (rename or drop one)")
            owner[col] = name
        features = [c for c in table.columns if c not in (id_column, label)]
        if not features:
            raise DataError(f"party {name!r} holds no feature column")
        check_numeric(table[features], f"party {name!r}")
    return holders[0]


def check_numeric(table: pd.DataFrame, what: str) -> None:
    """A non-numeric column of ``table`` (features only) is a DataError naming it."""
    bad = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    if bad:
        raise DataError(f"{what}: the feature columns {bad} are not numeric (encode them "
                        "first, e.g. one-hot)")


def held_out(n: int, test_fraction: float, rng: RngLike) -> np.ndarray:
    """The aligned rows held out for the metrics: a mask of ``round(test_fraction n)``
    rows drawn by ``rng`` (all False when test_fraction is 0)."""
    test = np.zeros(n, dtype=bool)
    if test_fraction:
        test[check_rng(rng).permutation(n)[: int(round(test_fraction * n))]] = True
    return test


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """The ROC AUC of ``score`` for binary labels ``y`` (NaN unless both classes occur)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score)) if len(np.unique(y)) == 2 else float("nan")
