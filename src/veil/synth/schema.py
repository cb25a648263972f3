"""The declared schema of a table to synthesize: public knowledge, never read from the data.

A :class:`Schema` lists the columns in order. A ``categorical`` column declares its
categories; a ``numeric`` column declares its bin edges ``e_0 < e_1 < ... < e_k`` (bin ``j``
is ``[e_j, e_{j+1})``, the last bin closed), and ``integer = true`` for whole numbers. The
model sees each column as a code in ``0 .. size - 1``; :meth:`Schema.encode` maps a table to
codes and refuses, before anything is measured, a column the schema lacks or lacks for the
table, a value outside the declared categories or bins, or a missing value.
:meth:`Schema.decode` maps codes back (a numeric code to a uniform value of its bin:
post-processing) and gives the declared dtypes.

The same schema from Python (:meth:`Schema.from_dict`) or a TOML file
(:func:`load_schema`)::

    [columns.age]
    type = "numeric"
    edges = [17, 27, 37, 47, 57, 67, 77, 91]
    integer = true

    [columns.sex]
    type = "categorical"
    categories = ["Female", "Male"]

:meth:`Schema.from_data` reads the categories from the data instead: an opt-in that
releases which values occur (one record can add a category), warned with
:class:`~veil.learn.public.PublicFactWarning`, as ``classes="from_data"`` is elsewhere.
"""

from __future__ import annotations

import math
import os
import tomllib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from veil.errors import ConfigError, DataError
from veil.learn.public import PublicFactWarning
from veil.random import RngLike, check_rng

__all__ = ["Column", "Schema", "load_schema"]

KINDS = ("categorical", "numeric")


@dataclass(frozen=True)
class Column:
    """One declared column: ``categories`` (categorical) or ``edges`` (numeric)."""

    name: str
    kind: str
    categories: tuple = ()
    edges: tuple[float, ...] = ()
    integer: bool = False

    def __post_init__(self) -> None:
        where = f"schema column {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"column name {self.name!r} is not allowed: a non-empty string")
        if self.kind not in KINDS:
            raise ConfigError(f"{where}: type={self.kind!r} is not allowed: one of {KINDS}")
        if self.kind == "categorical":
            cats = self.categories
            if self.edges or len(cats) < 1 or len(set(cats)) != len(cats):
                raise ConfigError(f"{where}: categories={list(cats)!r} is not allowed: a "
                                  "non-empty list of distinct values (and no edges)")
        else:
            e = self.edges
            if self.categories or len(e) < 2 or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in e) or any(b <= a for a, b in zip(e, e[1:])):
                raise ConfigError(f"{where}: edges={list(e)!r} is not allowed: at least two "
                                  "finite, strictly increasing numbers (and no categories)")

    @property
    def size(self) -> int:
        """The number of codes: categories, or bins."""
        return len(self.categories) if self.kind == "categorical" else len(self.edges) - 1

    def encode(self, values: pd.Series) -> np.ndarray:
        """Codes of ``values`` (DataError naming the column for a value outside the schema)."""
        if values.isna().any():
            raise DataError(f"column {self.name!r} has missing values; declare a category "
                            "for them (e.g. '?') or drop those rows")
        if self.kind == "categorical":
            # matched as text, so a CSV's "1" is the declared category 1
            lookup = {str(c): i for i, c in enumerate(self.categories)}
            codes = values.astype(str).map(lookup)
            bad = codes.isna().to_numpy()
            if bad.any():
                shown = sorted({str(v) for v in values[bad]})[:3]
                raise DataError(f"column {self.name!r} holds values outside its declared "
                                f"categories (e.g. {shown}); declare them in the schema")
            return codes.to_numpy(dtype=np.int64)
        try:
            x = pd.to_numeric(values).to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(f"column {self.name!r} is declared numeric but holds "
                            "non-numeric values") from None
        if np.any(x < self.edges[0]) or np.any(x > self.edges[-1]):
            raise DataError(f"column {self.name!r} holds values outside its declared edges "
                            f"[{self.edges[0]:g}, {self.edges[-1]:g}]; widen the edges")
        return np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, self.size - 1)

    def decode(self, codes: np.ndarray, rng: Any) -> pd.Series:
        """Values of ``codes``: a category, or a uniform value of the bin."""
        if self.kind == "categorical":
            return pd.Series(np.asarray(self.categories, dtype=object)[codes], name=self.name)
        lo = np.asarray(self.edges[:-1])[codes]
        hi = np.asarray(self.edges[1:])[codes]
        if self.integer:  # the whole numbers of [lo, hi): lo + floor(u * count)
            first = np.ceil(lo)
            last = np.where(codes == self.size - 1, np.floor(hi), np.ceil(hi) - 1)
            count = np.maximum(last - first + 1, 1)
            values = first + np.floor(rng.random(codes.size) * count)
            return pd.Series(values.astype(np.int64), name=self.name)
        return pd.Series(lo + rng.random(codes.size) * (hi - lo), name=self.name)


@dataclass(frozen=True)
class Schema:
    """The columns of a table, in order (see the module docstring)."""

    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        if not self.columns:
            raise ConfigError("schema: no columns declared")
        names = [c.name for c in self.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"schema: columns {dupes} are declared twice")

    @classmethod
    def from_dict(cls, spec: Mapping[str, Mapping[str, Any]]) -> Schema:
        """``{"age": {"type": "numeric", "edges": [...]}, "sex": {"type": "categorical",
        "categories": [...]}}`` (the ``[columns]`` table of a TOML schema)."""
        if not isinstance(spec, Mapping) or not spec:
            raise ConfigError(f"schema={spec!r} is not allowed: a mapping of column name to "
                              "{type, categories | edges}")
        cols = []
        for name, entry in spec.items():
            if not isinstance(entry, Mapping):
                raise ConfigError(f"schema column {name!r}: {entry!r} is not allowed: a table "
                                  "with type and categories or edges")
            unknown = set(entry) - {"type", "categories", "edges", "integer"}
            if unknown:
                raise ConfigError(f"schema column {name!r}: unknown keys {sorted(unknown)}; "
                                  "allowed: type, categories, edges, integer")
            cols.append(Column(name, entry.get("type"), tuple(entry.get("categories", ())),
                               tuple(entry.get("edges", ())), bool(entry.get("integer", False))))
        return cls(tuple(cols))

    @classmethod
    def from_data(cls, data: pd.DataFrame, *, edges: Mapping[str, Sequence[float]] | None = None,
                  integer: Sequence[str] = ()) -> Schema:
        """Opt-in: the categories of every column not in ``edges`` read from ``data`` (sorted),
        with a :class:`PublicFactWarning`; the numeric columns' ``edges`` stay declared."""
        edges = dict(edges or {})
        warnings.warn("Schema.from_data: the categories are read from the data: they are "
                      "released as they are (one record can add a category); declare the "
                      "schema to keep them out of the release", PublicFactWarning, stacklevel=2)
        cols = []
        for name in data.columns:
            if name in edges:
                cols.append(Column(str(name), "numeric", edges=tuple(edges.pop(name)),
                                   integer=name in integer))
            else:
                cols.append(Column(str(name), "categorical",
                                   categories=tuple(sorted(data[name].dropna().unique()))))
        if edges:
            raise ConfigError(f"edges names columns {sorted(edges)} that the data lacks")
        return cls(tuple(cols))

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def sizes(self) -> tuple[int, ...]:
        """The number of codes of each column."""
        return tuple(c.size for c in self.columns)

    def check_columns(self, data: Any) -> pd.DataFrame:
        """``data`` as a DataFrame with exactly the schema's columns (ConfigError naming the
        ones missing from either)."""
        if not isinstance(data, pd.DataFrame):
            raise DataError(f"data={type(data).__name__} is not allowed: a pandas DataFrame")
        have = [str(c) for c in data.columns]
        missing = [n for n in self.names if n not in have]
        extra = [n for n in have if n not in self.names]
        if missing or extra:
            parts = ([f"schema columns {missing} are missing from the data"] if missing else []) \
                + ([f"data columns {extra} are missing from the schema"] if extra else [])
            raise ConfigError("; ".join(parts) + " (declare every column, or drop it)")
        return data.rename(columns=str)

    def encode(self, data: Any) -> np.ndarray:
        """``(n, d)`` int64 codes of ``data`` in the schema's column order."""
        df = self.check_columns(data)
        if len(df) == 0:
            return np.zeros((0, len(self.columns)), dtype=np.int64)
        return np.stack([c.encode(df[c.name]) for c in self.columns], axis=1)

    def decode(self, codes: np.ndarray, rng: RngLike = None) -> pd.DataFrame:
        """The table of ``codes`` (``rng`` draws numeric values inside their bins)."""
        gen = check_rng(rng)
        return pd.DataFrame({c.name: c.decode(codes[:, j], gen)
                             for j, c in enumerate(self.columns)})


def load_schema(path: str | os.PathLike) -> Schema:
    """A :class:`Schema` from a TOML file with a ``[columns.<name>]`` table per column."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"schema={os.fspath(path)!r} is not allowed: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"schema {os.fspath(path)!r} is not valid TOML: {exc}") from None
    if set(doc) != {"columns"}:
        raise ConfigError(f"schema {os.fspath(path)!r}: expected one [columns] table (a "
                          f"[columns.<name>] per column), found {sorted(doc)}")
    return Schema.from_dict(doc["columns"])
