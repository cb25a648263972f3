"""Split a data set between the parties of a federation.

Horizontal partitioners return one index array per party (disjoint, covering every row);
the vertical partitioner returns one table per party with its own columns and its own,
overlapping but not identical, set of row ids.

* :func:`iid` — a uniformly random split into near-equal parts.
* :func:`dirichlet` — label skew: for each class c, the proportions of its rows that go to
  each party are drawn from Dirichlet(alpha); small alpha gives parties few classes
  (Hsu, Qi & Brown 2019).
* :func:`quantity_skew` — party sizes drawn from Dirichlet(alpha), labels IID.
* :func:`vertical` — columns split between parties (the label with party 0, the "active"
  party), each party holding a random subset of the row ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from veil._validation import check_int, check_positive, check_probability
from veil.errors import ConfigError, DataError
from veil.random import check_rng

_MAX_TRIES = 1000


def _check_parties(parties: int, n: int) -> int:
    parties = check_int(parties, "parties", low=1)
    if parties > n:
        raise ConfigError(f"parties={parties} is not allowed: more parties than the {n} rows")
    return parties


def _dirichlet(rng, alpha: float, k: int) -> np.ndarray:
    g = rng.gamma(alpha, 1.0, size=k)
    total = g.sum()
    return g / total if total > 0 else np.full(k, 1.0 / k)


def iid(n: int, parties: int, *, rng=None) -> list[np.ndarray]:
    """Rows 0..n-1 shuffled and split into ``parties`` parts whose sizes differ by <= 1."""
    n = check_int(n, "n", low=1)
    parties = _check_parties(parties, n)
    return [np.sort(p) for p in np.array_split(check_rng(rng).permutation(n), parties)]


def dirichlet(y: Sequence | np.ndarray, parties: int, *, alpha: float = 0.5,
              min_size: int = 1, rng=None) -> list[np.ndarray]:
    """Label-skewed split of the rows of ``y`` (each party gets at least ``min_size`` rows)."""
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0:
        raise DataError(f"y must be a non-empty 1-d array of labels, got shape {y.shape}")
    parties = _check_parties(parties, y.size)
    alpha = check_positive(alpha, "alpha")
    min_size = check_int(min_size, "min_size", low=0, high=y.size // parties)
    rng = check_rng(rng)
    classes = np.unique(y)
    for _ in range(_MAX_TRIES):
        parts: list[list[np.ndarray]] = [[] for _ in range(parties)]
        for c in classes:
            rows = rng.permutation(np.flatnonzero(y == c))
            cuts = (np.cumsum(_dirichlet(rng, alpha, parties))[:-1] * rows.size).astype(int)
            for i, chunk in enumerate(np.split(rows, cuts)):
                parts[i].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(p.size for p in out) >= min_size:
            return out
    raise ConfigError(f"could not give every party min_size={min_size} rows with alpha={alpha} "
                      f"in {_MAX_TRIES} draws; lower min_size or raise alpha")


def quantity_skew(n: int, parties: int, *, alpha: float = 1.0, min_size: int = 1,
                  rng=None) -> list[np.ndarray]:
    """Rows split IID into parts whose sizes follow Dirichlet(alpha) (at least min_size)."""
    n = check_int(n, "n", low=1)
    parties = _check_parties(parties, n)
    alpha = check_positive(alpha, "alpha")
    min_size = check_int(min_size, "min_size", low=0, high=n // parties)
    rng = check_rng(rng)
    spare = n - min_size * parties
    shares = _dirichlet(rng, alpha, parties)
    sizes = min_size + np.floor(shares * spare).astype(int)
    sizes[np.argmax(shares)] += n - sizes.sum()
    rows = rng.permutation(n)
    return [np.sort(p) for p in np.split(rows, np.cumsum(sizes)[:-1])]


def vertical(df: pd.DataFrame, parties: int, *, label: str | None = None,
             columns: Sequence[Sequence[str]] | None = None, overlap: float = 0.8,
             rng=None) -> list[pd.DataFrame]:
    """Vertical split: party i gets the columns ``columns[i]`` (default: the feature columns
    dealt round-robin in a random order; ``label`` goes to party 0) and the rows of a random
    subset of ids. A fraction ``overlap`` of the ids is held by every party; each other id
    by a random non-empty proper subset of them. Row ids are the index of ``df``."""
    if df.empty:
        raise DataError("df is empty; expected at least one row")
    parties = check_int(parties, "parties", low=2)
    overlap = check_probability(overlap, "overlap", low_open=True)
    rng = check_rng(rng)
    if label is not None and label not in df.columns:
        raise DataError(f"label={label!r} is not a column; columns: {list(df.columns)}")
    features = [c for c in df.columns if c != label]
    if columns is None:
        if len(features) < parties:
            raise ConfigError(f"parties={parties} is not allowed: only {len(features)} feature "
                              "columns to split")
        order = rng.permutation(len(features))
        columns = [[features[j] for j in order[i::parties]] for i in range(parties)]
    else:
        if len(columns) != parties:
            raise ConfigError(f"columns has {len(columns)} groups; expected parties={parties}")
        unknown = [c for group in columns for c in group if c not in df.columns]
        if unknown:
            raise DataError(f"columns names unknown columns {unknown}")
    groups = [list(g) for g in columns]
    if label is not None and label not in groups[0]:
        groups[0] = [label, *groups[0]]

    n = len(df)
    shared = rng.random(n) < overlap
    member = np.ones((parties, n), dtype=bool)
    rest = np.flatnonzero(~shared)
    if rest.size:
        # each non-shared id: a random subset of parties, redrawn until non-empty and proper
        pick = rng.random((parties, rest.size)) < 0.5
        bad = pick.all(axis=0) | ~pick.any(axis=0)
        while bad.any():
            pick[:, bad] = rng.random((parties, int(bad.sum()))) < 0.5
            bad = pick.all(axis=0) | ~pick.any(axis=0)
        member[:, rest] = pick
    return [df.loc[member[i], groups[i]] for i in range(parties)]
