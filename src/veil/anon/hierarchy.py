"""Generalization hierarchies (value generalization trees) for full-domain generalization.

A hierarchy is a table with one row per original value and one column per level: level 0
holds the original value, each further level a coarser label, and the last level usually
``*`` (the value suppressed). This is the format ARX reads and writes (CSV, ``;``-separated,
no header). A hierarchy must be a tree: two values that share a label at level ``a`` share
their labels at every level above ``a``.

Builders:

* :meth:`Hierarchy.intervals` for numbers: level ``i`` maps x to the interval of width
  ``w_i`` that holds it, ``[s + w_i*floor((x-s)/w_i), ... + w_i)``; widths must each divide
  the next so that intervals nest (the tree property).
* :meth:`Hierarchy.masking` for codes such as ZIP codes: level ``i`` replaces the last
  ``i`` characters by ``*`` (Sweeney 2002's ZIP hierarchy).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from veil._io import atomic_write
from veil.errors import ConfigError, DataError

__all__ = ["Hierarchy", "factorize", "value_keys", "sniff_separator"]

SEPARATORS = ";,\t|"


def sniff_separator(sample: str, default: str = ";") -> str:
    """The field separator of a CSV sample among ``; , TAB |`` (``default`` if unclear)."""
    try:
        return csv.Sniffer().sniff(sample, delimiters=SEPARATORS).delimiter
    except csv.Error:
        counts = {sep: sample.count(sep) for sep in SEPARATORS}
        best = max(counts, key=counts.get)
        return best if counts[best] else default


def _fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def factorize(series: pd.Series) -> tuple[np.ndarray, pd.Series]:
    """Codes of a column's values and the distinct values (NaN -> code -1)."""
    if pd.api.types.is_string_dtype(series.dtype):
        codes, uniques = pd.factorize(series.to_numpy(dtype=object))   # faster on strings
    else:
        codes, uniques = pd.factorize(series)
    return codes, pd.Series(uniques, dtype=series.dtype)


def value_keys(values: Iterable) -> np.ndarray:
    """Values as the strings hierarchies are keyed by (integral numbers without ``.0``)."""
    series = values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(
            series.dtype):
        arr = series.to_numpy(dtype=np.float64)
        if np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64).astype(str).astype(object)
        return np.array([_fmt_number(x) for x in arr], dtype=object)
    return np.array([str(v) if isinstance(v, str) else (_fmt_number(v) if isinstance(
        v, numbers.Real) and not isinstance(v, bool) else str(v)) for v in series], dtype=object)


class Hierarchy:
    """A generalization hierarchy: ``rows[i][level]`` is value ``i`` at ``level``.

    Parameters
    ----------
    rows : a 2-D table of strings (list of rows, numpy array or DataFrame without header);
        column 0 holds the original values.
    name : used in error messages (the column the hierarchy belongs to).

    Raises :class:`~veil.errors.DataError` for ragged rows, empty cells, an original value
    listed twice with different generalizations (exact repeats of a row are dropped, as
    ARX does) or a table that is not a tree.
    """

    def __init__(self, rows: Sequence[Sequence[object]] | np.ndarray | pd.DataFrame, *,
                 name: str | None = None) -> None:
        self.name = name
        label = f"hierarchy{f' of {name!r}' if name else ''}"
        if isinstance(rows, pd.DataFrame):
            rows = [[c for c in r if not _missing(c)] for r in rows.itertuples(index=False)]
        table = [list(r) for r in rows]
        if not table:
            raise DataError(f"{label} is empty: expected one row per original value")
        width = len(table[0])
        for i, row in enumerate(table):
            if len(row) != width:
                raise DataError(f"{label} has ragged rows: row {i + 1} ({row[0]!r}) has "
                                f"{len(row)} levels, row 1 has {width}; every row needs the "
                                "same number of levels")
            for j, cell in enumerate(row):
                if _missing(cell) or str(cell) == "":
                    raise DataError(f"{label}: row {i + 1} has an empty cell at level {j}")
        if width < 1:
            raise DataError(f"{label} has no levels")
        arr = np.array([[_cell(c) for c in row] for row in table], dtype=object)
        arr = _drop_repeated_rows(arr, label)
        for level in range(width - 1):
            pairs = pd.DataFrame({"a": arr[:, level], "b": arr[:, level + 1]}).drop_duplicates()
            dup = pairs["a"].duplicated(keep=False)
            if dup.any():
                bad = pairs[dup].iloc[0]["a"]
                parents = sorted(pairs[pairs["a"] == bad]["b"])
                raise DataError(f"{label} is not a tree: label {bad!r} at level {level} "
                                f"generalizes to {parents} at level {level + 1}")
        self._rows = arr
        self._index = pd.Index(arr[:, 0])

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_csv(cls, path: str | os.PathLike, *, sep: str = ";",
                 name: str | None = None) -> Hierarchy:
        """Read a hierarchy file as ARX writes and reads it: no header, ``;``-separated.

        The separator is never guessed: ARX's labels often hold commas (``[0,4]``,
        ``Inj, Sev Unk``), so a file of comma-separated rows needs ``sep=","``. A file
        whose rows are all single fields while each holds another separator is refused
        with that advice rather than read as a one-level hierarchy.
        """
        if not isinstance(sep, str) or len(sep) != 1 or sep in "\r\n\"":
            raise ConfigError(f"sep={sep!r} is not allowed: pass one character such as "
                              "';' (ARX), ',' or '\\t'")
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"hierarchy file {str(path)!r} cannot be read: {exc}") from None
        rows = [row for row in csv.reader(io.StringIO(text), delimiter=sep) if row]
        if rows and all(len(row) == 1 for row in rows):
            other = [s for s in SEPARATORS if s != sep and all(s in row[0] for row in rows)]
            if other:
                raise DataError(f"hierarchy file {str(path)!r} has no {sep!r} separator but "
                                f"every row holds {other[0]!r}: pass sep={other[0]!r} (CLI: "
                                f"--hierarchy-sep {other[0]!r})")
        return cls(rows, name=name or Path(path).stem)

    @classmethod
    def intervals(cls, values: Iterable[float], widths: Sequence[float], *,
                  start: float | None = None, name: str | None = None) -> Hierarchy:
        """Nested intervals of the given ``widths`` (each a multiple of the one before).

        Integer domains get inclusive labels ``lo-hi`` (ARX's style, ``20-24``); other
        domains half-open ``[lo, hi)``. The top level is ``*``.
        """
        x = np.unique(np.asarray(list(values), dtype=np.float64))
        if x.size == 0 or not np.all(np.isfinite(x)):
            raise DataError("intervals need at least one finite value")
        w = [float(v) for v in widths]
        if not w or any(not (v > 0 and math.isfinite(v)) for v in w):
            raise ConfigError(f"widths={list(widths)!r} is not allowed: need positive widths")
        for a, b in zip(w, w[1:]):
            if not (b > a and abs(b / a - round(b / a)) < 1e-9):
                raise ConfigError(f"widths={list(widths)!r} is not allowed: each width must "
                                  "be a larger multiple of the one before (intervals must nest)")
        s = w[-1] * math.floor(x.min() / w[-1]) if start is None else float(start)
        if s > x.min():
            raise ConfigError(f"start={start!r} is not allowed: must be <= the smallest value")
        integral = bool(np.all(x == np.round(x))) and all(v.is_integer() for v in w + [s])
        columns = [[_fmt_number(v) for v in x]]
        for width in w:
            lo = s + width * np.floor((x - s) / width)
            if integral:
                columns.append([f"{int(a)}-{int(a + width - 1)}" for a in lo])
            else:
                columns.append([f"[{_fmt_number(a)}, {_fmt_number(a + width)})" for a in lo])
        columns.append(["*"] * x.size)
        return cls(np.array(columns, dtype=object).T, name=name)

    @classmethod
    def masking(cls, values: Iterable[object], *, char: str = "*",
                name: str | None = None) -> Hierarchy:
        """Right-to-left masking (ZIP codes): level i masks the last i characters."""
        keys = sorted(set(value_keys(list(values))))
        if not keys:
            raise DataError("masking needs at least one value")
        depth = max(len(k) for k in keys)
        rows = [[k[:max(len(k) - i, 0)] + char * min(i, len(k)) for i in range(depth)] + ["*"]
                for k in keys]
        return cls(rows, name=name)

    # -- access ---------------------------------------------------------------------------
    @property
    def n_levels(self) -> int:
        """Number of levels, the original values included."""
        return self._rows.shape[1]

    @property
    def height(self) -> int:
        """Index of the most general level."""
        return self.n_levels - 1

    @property
    def values(self) -> np.ndarray:
        """The original values (level 0)."""
        return self._rows[:, 0].copy()

    def labels(self, level: int) -> np.ndarray:
        """The labels of every original value at ``level`` (row order)."""
        return self._rows[:, self._level(level)].copy()

    def positions(self, values: Iterable[object], column: str | None = None) -> np.ndarray:
        """Row index of each value; a value the hierarchy lacks is a DataError naming it."""
        series = values if isinstance(values, pd.Series) else pd.Series(list(values))
        col = column or self.name
        if pd.api.types.is_string_dtype(series.dtype):     # fast path: look strings up
            pos = self._index.get_indexer(series.to_numpy(dtype=object))
            if np.all(pos >= 0):
                return pos
        codes, uniques = factorize(series)
        if np.any(codes < 0):
            raise DataError(f"column {col!r} holds {int(np.sum(codes < 0))} missing value(s); "
                            "clean or impute them first")
        keys = value_keys(uniques)
        pos = self._index.get_indexer(keys)
        if np.any(pos < 0):
            missing = sorted(set(keys[pos < 0]))
            raise DataError(f"value {missing[0]!r} of column {col!r} is missing from its "
                            f"hierarchy ({len(missing)} missing value(s): {missing[:5]})")
        return pos[codes]

    def generalize(self, values: Iterable[object], level: int) -> np.ndarray:
        """Labels of ``values`` at ``level``."""
        return self._rows[self.positions(values), self._level(level)]

    def to_frame(self) -> pd.DataFrame:
        """The hierarchy as a header-less string table (ARX's layout)."""
        return pd.DataFrame(self._rows.astype(str))

    def to_csv(self, path: str | os.PathLike, sep: str = ";") -> None:
        """Write the hierarchy in ARX's CSV format."""
        atomic_write(path, self.to_frame().to_csv(sep=sep, header=False, index=False))

    def _level(self, level: int) -> int:
        if isinstance(level, bool) or not isinstance(level, numbers.Integral) or not (
                0 <= level < self.n_levels):
            raise ConfigError(f"level={level!r} is not allowed: must be an integer in "
                              f"[0, {self.height}]")
        return int(level)

    def __len__(self) -> int:
        return self._rows.shape[0]

    def __repr__(self) -> str:
        return f"Hierarchy({self.name!r}, values={len(self)}, levels={self.n_levels})"


def _missing(cell: object) -> bool:
    return cell is None or (isinstance(cell, float) and math.isnan(cell))


def _cell(cell: object) -> str:
    return str(cell) if isinstance(cell, str) else value_keys([cell])[0]


def _drop_repeated_rows(arr: np.ndarray, label: str) -> np.ndarray:
    """Rows without exact repeats (ARX accepts them); one value with two paths is refused."""
    frame = pd.DataFrame(arr)
    unique = frame.drop_duplicates()
    clash = unique[0].duplicated(keep=False)
    if clash.any():
        value = unique[0][clash].iloc[0]
        where = np.flatnonzero(arr[:, 0] == value)[:2]
        raise DataError(f"{label} lists the original value {value!r} twice with different "
                        f"generalizations: row {where[0] + 1} {arr[where[0]].tolist()} and "
                        f"row {where[1] + 1} {arr[where[1]].tolist()}")
    return arr if len(unique) == len(frame) else arr[np.sort(unique.index.to_numpy())]
