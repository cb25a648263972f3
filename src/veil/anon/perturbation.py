"""Perturbative masking: permutation, additive noise and data swapping.

* permutation (Zhang et al. 2007's "anonymized permutation"; Anatomy's idea on a
  generalized table): the sensitive values of every equivalence class are shuffled, so the
  link between a record's quasi-identifiers and its sensitive value is random within the
  class while every class keeps its distribution;
* randomization (Agrawal & Srikant, SIGMOD 2000): ``y = x + r`` with r drawn independently
  from N(0, scale^2) or U(-scale, scale); distributions can be reconstructed, single
  values are masked;
* data swapping, as rank swapping (Moore 1996): the values of an attribute are sorted and
  each value is exchanged with a random not-yet-swapped value whose rank is at most
  ``p`` percent of n away, preserving the attribute's distribution exactly.

All randomness comes from :mod:`veil.random` (``rng=``; secure by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from veil._validation import check_choice, check_positive
from veil.anon.metrics import class_ids
from veil.errors import ConfigError, DataError
from veil.random import RngLike, check_rng

__all__ = ["permute_sensitive", "add_noise", "rank_swap"]


def _columns(table: pd.DataFrame, columns: Sequence[str] | str) -> list[str]:
    if not isinstance(table, pd.DataFrame) or len(table) == 0:
        raise DataError("the table is empty or not a DataFrame; expected at least one record")
    cols = [columns] if isinstance(columns, str) else list(columns)
    if not cols:
        raise ConfigError("columns=[] is not allowed: name at least one column")
    for c in cols:
        if c not in table.columns:
            raise DataError(f"column {c!r} is not in the table (columns: {list(table.columns)})")
    return cols


def _numeric(table: pd.DataFrame, col: str) -> np.ndarray:
    values = pd.to_numeric(table[col], errors="coerce")
    if values.isna().any():
        raise DataError(f"column {col!r} must be numeric without missing values")
    return values.to_numpy(dtype=np.float64)


def _distinct_keys(rng, n: int) -> np.ndarray:
    while True:
        keys = rng.random_raw(n)
        if np.unique(keys).size == n:
            return keys


def permute_sensitive(table: pd.DataFrame, quasi_identifiers: Sequence[str], sensitive: str,
                      rng: RngLike = None) -> pd.DataFrame:
    """A copy of ``table`` with ``sensitive`` shuffled uniformly within each class."""
    qis = _columns(table, quasi_identifiers)
    _columns(table, [sensitive])
    if sensitive in qis:
        raise ConfigError(f"sensitive={sensitive!r} is not allowed: it is also a "
                          "quasi-identifier")
    rng = check_rng(rng)
    ids, _ = class_ids(table, qis)
    slots = np.argsort(ids, kind="stable")
    draw = np.lexsort((_distinct_keys(rng, len(table)), ids))
    values = table[sensitive].to_numpy()
    shuffled = values.copy()
    shuffled[slots] = values[draw]
    out = table.copy()
    out[sensitive] = shuffled
    return out


def add_noise(table: pd.DataFrame, columns: Sequence[str] | str,
              scale: float | Mapping[str, float], *, distribution: str = "gaussian",
              rng: RngLike = None) -> pd.DataFrame:
    """A copy of ``table`` with additive noise on numeric ``columns``.

    ``scale`` (one value or one per column) is the noise's standard deviation for
    ``"gaussian"`` and its half-width for ``"uniform"``.
    """
    cols = _columns(table, columns)
    check_choice(distribution, "distribution", ("gaussian", "uniform"))
    scales = {c: check_positive(scale[c] if isinstance(scale, Mapping) else scale,
                                f"scale[{c!r}]") for c in cols}
    values = {c: _numeric(table, c) for c in cols}
    rng = check_rng(rng)
    out = table.copy()
    for c in cols:
        s = scales[c]
        noise = (rng.normal(0.0, s, len(table)) if distribution == "gaussian"
                 else rng.uniform(-s, s, len(table)))
        out[c] = values[c] + noise
    return out


def rank_swap(table: pd.DataFrame, columns: Sequence[str] | str, p: float = 5.0,
              rng: RngLike = None) -> pd.DataFrame:
    """A copy of ``table`` with each of ``columns`` rank-swapped within ``p`` percent of n."""
    cols = _columns(table, columns)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 100:
        raise ConfigError(f"p={p!r} is not allowed: must be a percentage in (0, 100]")
    rng = check_rng(rng)
    n = len(table)
    window = max(1, int(p * n / 100))
    out = table.copy()
    for c in cols:
        values = table[c].to_numpy()
        order = np.argsort(values, kind="stable")
        done = np.zeros(n, dtype=bool)
        swapped = values.copy()
        for i in range(n):
            if done[i]:
                continue
            done[i] = True
            free = np.flatnonzero(~done[i + 1:i + 1 + window])
            if free.size:
                j = i + 1 + int(free[rng.integers(0, free.size)])
                done[j] = True
                a, b = order[i], order[j]
                swapped[a], swapped[b] = values[b], values[a]
        out[c] = swapped
    return out
