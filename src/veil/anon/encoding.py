"""Integer encoding of a table for fast search: codes per level, classes, roll-up.

Each quasi-identifier is encoded once: ``codes[level]`` holds, for every row, the index of
its label at that level among the labels present in the data. An equivalence class of a
transformation (one level per column) is a tuple of codes; a class table groups rows (or
the classes of a finer transformation) by the mixed-radix key ``sum_j code_j * stride_j``,
summing counts and the histograms of the sensitive attribute.

Roll-up (the optimisation of Incognito/Flash/ARX): because hierarchies are trees, the
classes of a coarser transformation are unions of the classes of a finer one, so they are
computed from the finer node's (small) class table by lifting its codes, not from the rows.
A roll-up costs a few passes over the finer table: runs of consecutive columns with a small
joint domain ("blocks") are lifted together by one table look-up that gives their digit of
the coarser key directly, classes are numbered through one slot per key (no sort), and the
coarser table keeps its codes block by block, decoding them into columns only when asked.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from veil.anon.hierarchy import Hierarchy, factorize, value_keys
from veil.errors import DataError

__all__ = ["ClassTable", "EncodedColumn", "EncodedTable", "SensitiveDomain", "classify",
           "group"]

#: largest key space grouped with a dense bincount instead of a sort
_DENSE_LIMIT = 1 << 21
#: largest key space a roll-up groups through a slot per key instead of a sort
_SLOT_LIMIT = 1 << 22
#: largest joint domain of a block of columns that a roll-up lifts with one table
_BLOCK_LIMIT = 1 << 14
#: entries of the block lift tables kept (beyond it they are dropped and rebuilt on use)
_LIFT_CACHE = 1 << 23


class ClassTable:
    """Equivalence classes: ``codes`` (classes x columns), ``counts``, sensitive ``hist``.

    A roll-up gives the codes as ``blocks`` (:meth:`EncodedTable.rollup`) and ``decode``,
    which turns them into ``codes`` on first use.
    """

    def __init__(self, codes: np.ndarray | None, counts: np.ndarray,
                 hist: np.ndarray | None = None, blocks: list[np.ndarray] | None = None,
                 decode: Callable[[list[np.ndarray]], np.ndarray] | None = None) -> None:
        self._codes = codes
        self.counts = counts
        self.hist = hist
        self.blocks = blocks
        self._decode = decode
        #: the first row of each class (kept through roll-ups when the bottom has it)
        self.first: np.ndarray | None = None

    @property
    def codes(self) -> np.ndarray:
        if self._codes is None:
            self._codes = self._decode(self.blocks)
        return self._codes

    def __len__(self) -> int:
        return self.counts.shape[0]


def _strides(radices: np.ndarray) -> np.ndarray:
    """Mixed-radix place values: the key of a code tuple is ``codes @ strides``."""
    strides = np.ones(len(radices), dtype=np.int64)
    for j in range(len(radices) - 2, -1, -1):
        strides[j] = strides[j + 1] * radices[j + 1]
    return strides


def _fits(radices: np.ndarray) -> bool:
    """Whether every key of this radix system fits in an int64."""
    return math.prod(int(r) for r in radices) < 1 << 62


def classify(codes: np.ndarray, radices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class index of every row of ``codes`` and the codes of each class (in key order)."""
    if not _fits(radices):                     # keys would overflow: group the tuples
        unique, inverse = np.unique(codes, axis=0, return_inverse=True)
        return inverse.ravel(), unique
    inverse, first = classify_keys(codes @ _strides(radices), radices)
    return inverse, codes[first]


def classify_keys(key: np.ndarray, radices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class index (in key order) of every row given by its key (``codes @ strides``), and
    one row of each class (its representative: the class's codes are that row's)."""
    space = math.prod(int(r) for r in radices)
    if space <= min(_DENSE_LIMIT, 8 * key.size + 4096):
        seen = np.zeros(space, dtype=bool)
        seen[key] = True
        present = np.flatnonzero(seen)
        rank = np.empty(space, dtype=np.int64)
        rank[present] = np.arange(present.size)
        inverse = rank[key]
    else:
        present, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.ravel()
    first = np.empty(present.size, dtype=np.int64)
    first[inverse] = np.arange(key.size)
    return inverse, first


def group(codes: np.ndarray, radices: np.ndarray, counts: np.ndarray | None = None,
          hist: np.ndarray | None = None, sensitive: np.ndarray | None = None,
          n_sensitive: int = 0) -> ClassTable:
    """Merge rows with equal code tuples.

    ``counts`` (None: each row counts 1) and ``hist`` (classes x m) are summed; rows may
    instead carry one ``sensitive`` code each (histograms with ``n_sensitive`` bins).
    """
    return _merge(*classify(codes, radices), counts, hist, sensitive, n_sensitive)


def _merge(inverse: np.ndarray, new_codes: np.ndarray | None, counts: np.ndarray | None,
           hist: np.ndarray | None, sensitive: np.ndarray | None,
           n_sensitive: int, bins: np.ndarray | None = None) -> ClassTable:
    """The class table of rows merged by ``inverse``: one class per row of ``new_codes``,
    or, given ``bins``, one per bin of ``inverse`` listed there (``inverse`` may then
    name any bin below the number of rows). Codes and histograms are stored
    column-major, so that one column (a bincount's weights) is contiguous."""
    if bins is None:
        size = new_codes.shape[0]
        bins = slice(None)
    else:
        size = inverse.size

    def total(weights: np.ndarray | None) -> np.ndarray:
        return np.bincount(inverse, weights=weights, minlength=size)[bins]

    new_counts = total(counts).astype(np.int64)
    new_hist = None
    if hist is not None:                       # one bincount per sensitive value
        new_hist = np.empty((new_counts.size, hist.shape[1]), dtype=np.int64, order="F")
        for v in range(hist.shape[1]):
            new_hist[:, v] = total(hist[:, v])
    elif sensitive is not None:
        new_hist = np.asfortranarray(np.bincount(
            inverse * n_sensitive + sensitive, minlength=size * n_sensitive).reshape(
                size, n_sensitive))
    codes = None if new_codes is None else np.asfortranarray(new_codes)
    return ClassTable(codes, new_counts, new_hist)


def _first_of(first: np.ndarray | None, inverse: np.ndarray, size: int,
              bins: np.ndarray | None = None) -> np.ndarray | None:
    """The first row of each merged class: the least of its parts' (``inverse``: part ->
    merged class, or representative part when ``bins`` lists the representatives)."""
    if first is None:
        return None
    out = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(out, inverse, first)
    return out if bins is None else out[bins]


class EncodedColumn:
    """One quasi-identifier encoded at every level of its hierarchy.

    Rows carry their level-0 code (``codes0``); everything per level lives on the (small)
    domain: ``labels[l]`` (code -> label, labels present in the data), ``sizes[l]``,
    ``lift(a, b)`` (code at level a -> code at level b, a <= b) and ``counts[l]`` (records
    per code).
    """

    def __init__(self, name: str, column: pd.Series, hierarchy: Hierarchy) -> None:
        self.name = name
        self.hierarchy = hierarchy
        rows = hierarchy.positions(column, name)
        present = np.flatnonzero(np.bincount(rows, minlength=len(hierarchy)))
        present = present[np.argsort(hierarchy.labels(0)[present].astype(str), kind="stable")]
        remap = np.empty(len(hierarchy), dtype=np.int64)
        remap[present] = np.arange(present.size)
        self.codes0 = remap[rows]
        self.labels: list[np.ndarray] = []
        self._up: list[np.ndarray] = []          # level-0 code -> level-l code
        for level in range(hierarchy.n_levels):
            labels, up = np.unique(hierarchy.labels(level)[present].astype(str),
                                   return_inverse=True)
            self.labels.append(labels.astype(object))
            self._up.append(up.ravel().astype(np.int64))
        self.sizes = np.array([lab.size for lab in self.labels], dtype=np.int64)
        counts0 = np.bincount(self.codes0, minlength=present.size)
        self.counts = [np.bincount(up, weights=counts0, minlength=size).astype(np.int64)
                       for up, size in zip(self._up, self.sizes)]
        self._lifts: dict[tuple[int, int], np.ndarray] = {}

    @property
    def height(self) -> int:
        return len(self.labels) - 1

    def lift(self, a: int, b: int) -> np.ndarray:
        """Map of codes at level ``a`` to codes at level ``b``."""
        if (a, b) not in self._lifts:
            out = np.empty(self.sizes[a], dtype=np.int64)
            out[self._up[a]] = self._up[b]
            self._lifts[(a, b)] = out
        return self._lifts[(a, b)]

    def codes(self, level: int) -> np.ndarray:
        """The code of every row at ``level``."""
        return self._up[level][self.codes0]


class SensitiveDomain:
    """The sensitive attribute: codes in domain order, global distribution, kind.

    Numeric attributes are ordered by value (for the ordered EMD), others by label.
    """

    def __init__(self, name: str, column: pd.Series) -> None:
        if column.isna().any():
            raise DataError(f"sensitive column {name!r} holds {int(column.isna().sum())} "
                            "missing value(s); clean or impute them first")
        self.name = name
        rows, uniques = factorize(column)
        numeric = pd.to_numeric(uniques, errors="coerce")
        self.numeric = bool(numeric.notna().all())
        if self.numeric:
            values, inverse = np.unique(numeric.to_numpy(dtype=np.float64), return_inverse=True)
            self.values = values
            self.labels = value_keys(pd.Series(values))
        else:
            labels, inverse = np.unique(value_keys(uniques).astype(str), return_inverse=True)
            self.values = labels.astype(object)
            self.labels = self.values
        self.codes = inverse.ravel().astype(np.int64)[rows]
        self.size = int(self.values.size)
        self.q = np.bincount(self.codes, minlength=self.size) / self.codes.size


class EncodedTable:
    """A table's quasi-identifiers (and sensitive attribute) encoded once for the search."""

    def __init__(self, table: pd.DataFrame, hierarchies: dict[str, Hierarchy],
                 sensitive: SensitiveDomain | None, *, histograms: bool = True) -> None:
        self.n = len(table)
        self.names = list(hierarchies)
        self.columns = [EncodedColumn(c, table[c], h) for c, h in hierarchies.items()]
        self.heights = np.array([c.height for c in self.columns], dtype=np.int64)
        self.sensitive = sensitive
        self.histograms = histograms and sensitive is not None
        self._bottom: ClassTable | None = None
        self._slots = np.empty(0, dtype=np.intp)
        self._rows = np.arange(0)
        # runs of consecutive columns whose level-0 codes jointly take at most
        # _BLOCK_LIMIT values: a roll-up lifts each run with one table look-up
        self.blocks: list[tuple[int, int]] = []
        for j in range(len(self.columns)):
            if self.blocks and math.prod(int(c.sizes[0]) for c in self.columns[
                    self.blocks[-1][0]:j + 1]) <= _BLOCK_LIMIT:
                self.blocks[-1] = (self.blocks[-1][0], j + 1)
            else:
                self.blocks.append((j, j + 1))
        self._block_lifts: dict[tuple, np.ndarray] = {}
        self._lift_entries = 0
        self._block_digits: dict[tuple, np.ndarray] = {}

    def bottom(self) -> ClassTable:
        """Classes of the identity transformation (every column at level 0)."""
        if self._bottom is None:
            codes = np.stack([c.codes0 for c in self.columns], axis=1)
            sens = self.sensitive if self.histograms else None
            inverse, new_codes = classify(codes, self.radices(np.zeros(len(self.columns),
                                                                       np.int64)))
            self._bottom = _merge(inverse, new_codes, None, None,
                                  None if sens is None else sens.codes,
                                  0 if sens is None else sens.size)
            first = np.empty(len(self._bottom), dtype=np.int64)
            first[inverse[::-1]] = np.arange(self.n - 1, -1, -1)
            self._bottom.first = first
        return self._bottom

    def radices(self, levels: np.ndarray) -> np.ndarray:
        return np.array([c.sizes[lv] for c, lv in zip(self.columns, levels)], dtype=np.int64)

    def rollup(self, table: ClassTable, source: np.ndarray, target: np.ndarray) -> ClassTable:
        """Classes at ``target`` levels from the classes at the finer ``source`` levels."""
        radices = self.radices(target)
        if not _fits(radices):
            codes = table.codes.copy()
            for j, (a, b) in enumerate(zip(source, target)):
                if a != b:
                    codes[:, j] = self.columns[j].lift(int(a), int(b))[codes[:, j]]
            inverse, new_codes = classify(codes, radices)
            merged = _merge(inverse, new_codes, table.counts, table.hist, None, 0)
            merged.first = _first_of(table.first, inverse, len(merged))
            return merged
        # the key of a class's lifted codes, block by block: a block's code at the
        # source levels is looked up in its lift table (scaled by the block's place
        # value), giving its digit of the mixed-radix key at the target levels
        strides = _strides(radices)
        blocks = self._blocks_of(table, source)
        lifts = [self._block_lift(lo, hi, source, target) for lo, hi in self.blocks]
        key = None
        for (_, hi), lift, codes in zip(self.blocks, lifts, blocks):
            if codes.size >= lift.size:
                part = (lift * strides[hi - 1]).take(codes)
            else:
                part = lift.take(codes)
                part *= strides[hi - 1]
            if key is None:
                key = part
            else:
                key += part
        representative, first = self._group_keys(key, radices)
        levels = target.copy()
        merged = _merge(representative, None, table.counts, table.hist, None, 0, bins=first)
        merged.first = _first_of(table.first, representative, len(table), first)
        merged.blocks = [lift.take(codes.take(first)) for lift, codes in zip(lifts, blocks)]
        merged._decode = lambda blocks: self._decode(blocks, levels)
        return merged

    def _blocks_of(self, table: ClassTable, levels: np.ndarray) -> list[np.ndarray]:
        """The codes of ``table`` (classes at ``levels``) block by block (mixed radix)."""
        if table.blocks is None:
            table.blocks = []
            for lo, hi in self.blocks:
                code = table.codes[:, lo].copy()
                for j in range(lo + 1, hi):
                    code *= self.columns[j].sizes[levels[j]]
                    code += table.codes[:, j]
                table.blocks.append(code)
        return table.blocks

    def _block_lift(self, lo: int, hi: int, source: np.ndarray,
                    target: np.ndarray) -> np.ndarray:
        """Map of a block's codes at ``source`` levels to its codes at ``target`` levels."""
        name = (lo, tuple(source[lo:hi].tolist()), tuple(target[lo:hi].tolist()))
        lift = self._block_lifts.get(name)
        if lift is None:
            lift = np.zeros(1, dtype=np.int64)
            for j in range(lo, hi):
                col = self.columns[j]
                lift = (lift[:, None] * col.sizes[target[j]]
                        + col.lift(int(source[j]), int(target[j]))).ravel()
            self._lift_entries += lift.size
            if self._lift_entries > _LIFT_CACHE:
                self._block_lifts.clear()
                self._lift_entries = lift.size
            self._block_lifts[name] = lift
        return lift

    def _decode(self, blocks: list[np.ndarray], levels: np.ndarray) -> np.ndarray:
        """Codes (classes x columns, column-major) from their blocks at ``levels``."""
        codes = np.empty((blocks[0].size, len(self.columns)), dtype=np.int64, order="F")
        for (lo, hi), block in zip(self.blocks, blocks):
            name = (lo, tuple(levels[lo:hi].tolist()))
            digits = self._block_digits.get(name)
            if digits is None:
                digits = np.indices(self.radices(levels)[lo:hi]).reshape(hi - lo, -1)
                self._block_digits[name] = digits
            for j in range(lo, hi):
                codes[:, j] = digits[j - lo].take(block)
        return codes

    def _group_keys(self, key: np.ndarray, radices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The representative row of every row's key, and the representatives (one per
        key, in row order). In O(rows), without a sort or a pass over the key space:
        every row writes its index into its key's slot and reads back whichever write won.
        The slots are kept between roll-ups and never need clearing: each is written
        before it is read. Key spaces beyond the slots are sorted
        (:func:`classify_keys`)."""
        space = math.prod(int(r) for r in radices)
        if space > _SLOT_LIMIT:
            inverse, first = classify_keys(key, radices)
            return first.take(inverse), first
        if self._slots.size < space:
            self._slots = np.empty(max(space, min(2 * self._slots.size, _SLOT_LIMIT)),
                                   dtype=np.intp)
        if self._rows.size < key.size:
            self._rows = np.arange(key.size)
        rows = self._rows[:key.size]
        self._slots[key] = rows
        representative = self._slots.take(key)
        return representative, np.flatnonzero(representative == rows)

    def row_codes(self, levels: np.ndarray) -> np.ndarray:
        """Codes of every row at ``levels`` (rows x columns)."""
        return np.stack([c.codes(lv) for c, lv in zip(self.columns, levels)], axis=1)

    def row_classes(self, table: ClassTable, levels: np.ndarray) -> np.ndarray:
        """Index in ``table`` (classes at ``levels``) of every row's class."""
        ids, _ = classify(np.vstack([table.codes, self.row_codes(levels)]),
                          self.radices(levels))
        position = np.empty(len(table), dtype=np.int64)
        position[ids[:len(table)]] = np.arange(len(table))
        return position[ids[len(table):]]
