"""Mondrian multidimensional partitioning (LeFevre, DeWitt & Ramakrishnan, ICDE 2006).

Every quasi-identifier is mapped to an ordered axis: numbers by value (a hierarchy given
for a numeric column is refused, not ignored), categories by the order of their hierarchy
(siblings next to each other) or alphabetically. Starting from
the whole table, a partition is cut along the attribute with the widest normalized span —
``(max - min) / (column max - column min)`` for numbers, ``(v - 1) / (V - 1)`` for v of
the column's V categories (the loss of releasing the partition) — then the next widest:

* numbers, strict: ``{x <= median}`` and ``{x > median}`` (no value on both sides; when
  every value is <= the median, at the next lower value);
* numbers, relaxed: the records sorted on the axis are halved, so records equal to the
  median may go to both sides and any partition of at least 2k records can be cut;
* categories are cut between two consecutive values of the axis (a value is never split),
  trying the boundaries in increasing order of the loss of the two halves,
  ``|L| (v_L - 1) + |R| (v_R - 1)``.

A cut is allowable when both halves satisfy every privacy model (any model that holds
for the parts holds for their union, so the leaves satisfy the models). Partitions with
no allowable cut are released, each quasi-identifier as the range ``[min, max]`` of its
numbers or the set ``{a,b}`` of its categories.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from veil.anon.encoding import SensitiveDomain
from veil.anon.hierarchy import Hierarchy, value_keys
from veil.anon.models import PrivacyModel
from veil.errors import ConfigError, DataError

__all__ = ["OrderedColumn", "mondrian_partition", "release_partitions"]


class OrderedColumn:
    """A quasi-identifier on an ordered axis: ``x`` per row, ``labels`` of the axis values."""

    def __init__(self, name: str, column: pd.Series, hierarchy: Hierarchy | None) -> None:
        self.name = name
        if column.isna().any():
            raise DataError(f"column {name!r} holds {int(column.isna().sum())} missing "
                            "value(s); clean or impute them first")
        numbers = pd.to_numeric(column, errors="coerce")
        self.numeric = bool(numbers.notna().all())
        if self.numeric and hierarchy is not None:
            raise ConfigError(f"quasi_identifiers[{name!r}]: a hierarchy was given for a "
                              "numeric column, but Mondrian cuts numbers by value and would "
                              f"ignore it; pass {name!r}: None")
        if self.numeric:
            values, codes = np.unique(numbers.to_numpy(dtype=np.float64), return_inverse=True)
            self.x = values[codes.ravel()]
            self.labels = value_keys(pd.Series(values))
            self.codes = codes.ravel()
            self.values = values
            return
        keys = value_keys(column).astype(str)
        present = np.unique(keys)
        if hierarchy is not None:
            hierarchy.positions(present, name)
            order = {v: i for i, v in enumerate(_tree_order(hierarchy))}
            present = np.array(sorted(present, key=order.__getitem__), dtype=object)
        rank = pd.Index(present).get_indexer(keys)
        self.values = np.arange(present.size, dtype=np.float64)
        self.x = rank.astype(np.float64)
        self.labels = present.astype(object)
        self.codes = rank


def _tree_order(hierarchy: Hierarchy) -> list[str]:
    """Original values sorted by their ancestors, top level first (siblings contiguous)."""
    levels = [hierarchy.labels(level) for level in range(hierarchy.height, -1, -1)]
    rows = sorted(range(len(hierarchy)), key=lambda i: tuple(lv[i] for lv in levels))
    return [levels[-1][i] for i in rows]


def mondrian_partition(columns: Sequence[OrderedColumn], models: Sequence[PrivacyModel],
                       domain: SensitiveDomain | None = None, *,
                       strict: bool = False) -> np.ndarray:
    """Partition index of every row."""
    X = np.stack([c.x for c in columns], axis=1)
    codes = [c.codes for c in columns]
    sizes = [c.values.size for c in columns]
    numeric = [c.numeric for c in columns]
    n = X.shape[0]
    scale = X.max(axis=0) - X.min(axis=0)
    scale[scale == 0] = 1.0
    k = max(m.min_class_size for m in models)
    sens = None if domain is None else domain.codes
    m = 0 if domain is None else domain.size

    def allowed(left: np.ndarray, right: np.ndarray) -> bool:
        if left.size < k or right.size < k:
            return False
        counts = np.array([left.size, right.size])
        hist = None
        if sens is not None:
            hist = np.stack([np.bincount(sens[left], minlength=m),
                             np.bincount(sens[right], minlength=m)])
        return all(model.satisfied(counts, hist, domain).all() for model in models)

    def numeric_cuts(idx: np.ndarray, d: int):
        v = X[idx, d]
        if strict:
            median = np.partition(v, (v.size - 1) // 2)[(v.size - 1) // 2]
            left = v <= median
            if left.all():
                left = v < median
            yield idx[left], idx[~left]
        else:
            order = np.argsort(v, kind="stable")
            yield idx[order[:v.size // 2]], idx[order[v.size // 2:]]

    def category_cuts(idx: np.ndarray, d: int, counts: np.ndarray):
        present = np.flatnonzero(counts)
        left = np.cumsum(counts[present])[:-1]
        i = np.arange(left.size)
        cost = left * i + (idx.size - left) * (present.size - i - 2)
        v = codes[d][idx]
        for j in np.argsort(cost, kind="stable"):
            if left[j] >= k and idx.size - left[j] >= k:
                side = v <= present[j]
                yield idx[side], idx[~side]

    def cut(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        if idx.size < 2 * k:
            return None
        sub = X[idx]
        spans = np.empty(len(columns))
        counts: dict[int, np.ndarray] = {}
        for d in range(len(columns)):
            if numeric[d]:
                spans[d] = (sub[:, d].max() - sub[:, d].min()) / scale[d]
            else:
                counts[d] = np.bincount(codes[d][idx], minlength=sizes[d])
                spans[d] = (np.count_nonzero(counts[d]) - 1) / max(sizes[d] - 1, 1)
        for d in np.argsort(-spans, kind="stable"):
            if spans[d] == 0:
                return None
            cuts = numeric_cuts(idx, d) if numeric[d] else category_cuts(idx, d, counts[d])
            for parts in cuts:
                if allowed(*parts):
                    return parts
        return None

    out = np.empty(n, dtype=np.int64)
    stack = [np.arange(n)]
    count = 0
    while stack:
        idx = stack.pop()
        halves = cut(idx)
        if halves is None:
            out[idx] = count
            count += 1
        else:
            stack.extend(halves)
    return out


def release_partitions(columns: Sequence[OrderedColumn],
                       parts: np.ndarray) -> dict[str, np.ndarray]:
    """Released value of every row: ``[min, max]`` of numbers, ``{a,b}`` of categories."""
    released: dict[str, np.ndarray] = {}
    n_parts = int(parts.max()) + 1
    for col in columns:
        size = col.values.size
        pairs = np.unique(parts * size + col.codes)
        owner, code = pairs // size, pairs % size
        bounds = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        ends = np.r_[bounds[1:], pairs.size]
        names = np.empty(n_parts, dtype=object)
        for start, end in zip(bounds, ends):
            labels = col.labels[code[start:end]]
            if end - start == 1:
                names[owner[start]] = labels[0]
            elif col.numeric:
                names[owner[start]] = f"[{labels[0]}, {labels[-1]}]"
            else:
                names[owner[start]] = "{" + ",".join(labels) + "}"
        released[col.name] = names[parts]
    return released
