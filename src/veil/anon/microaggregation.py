"""MDAV microaggregation (Domingo-Ferrer & Mateo-Sanz, IEEE TKDE 2002; Domingo-Ferrer &
Torra 2005).

Records are standardized (z-scores per attribute) and grouped into clusters of at least k
(at most 2k - 1) records; each record is then released as its cluster's centroid, which
makes the table k-anonymous on those attributes. Maximum Distance to Average Vector:

    while at least 3k records remain:
        c = centroid of the remaining records
        r = the record farthest from c;   s = the record farthest from r
        cluster r with its k - 1 nearest remaining records, then s with its k - 1 nearest
    if 2k..3k-1 remain: cluster the record farthest from their centroid with its k - 1
        nearest; the rest form the last cluster
    otherwise the (fewer than 2k) remaining records form the last cluster

Information loss ``IL = 100 * SSE / SST`` (within-cluster over total sum of squares of
the standardized data) is :func:`veil.anon.metrics.information_loss`.
"""

from __future__ import annotations

import numpy as np

from veil._validation import check_array, check_int
from veil.errors import DataError

__all__ = ["mdav", "standardize"]


def standardize(X: np.ndarray) -> np.ndarray:
    """Z-scores per column (a constant column becomes 0)."""
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)


def mdav(X: np.ndarray, k: int) -> np.ndarray:
    """Cluster index of every row of ``X`` (rows x attributes, already scaled)."""
    X = check_array(X, "X", ndim=(1, 2))
    X = X.reshape(len(X), -1)
    k = check_int(k, "k", low=1)
    n = len(X)
    if n < k:
        raise DataError(f"MDAV needs at least k={k} records; the table has {n}")
    groups = np.full(n, -1, dtype=np.int64)
    remaining = np.arange(n)
    label = 0

    def take(rows: np.ndarray, centre: np.ndarray) -> np.ndarray:
        """The k rows of ``rows`` nearest to ``centre``."""
        d = ((X[rows] - centre) ** 2).sum(axis=1)
        return rows[np.argpartition(d, k - 1)[:k]] if rows.size > k else rows

    def farthest(rows: np.ndarray, centre: np.ndarray) -> int:
        return int(rows[np.argmax(((X[rows] - centre) ** 2).sum(axis=1))])

    while remaining.size >= 3 * k:
        r = farthest(remaining, X[remaining].mean(axis=0))
        s = farthest(remaining, X[r])
        for seed in (r, s):
            members = take(remaining, X[seed])
            groups[members] = label
            label += 1
            remaining = remaining[groups[remaining] < 0]
    if remaining.size >= 2 * k:
        members = take(remaining, X[farthest(remaining, X[remaining].mean(axis=0))])
        groups[members] = label
        label += 1
        remaining = remaining[groups[remaining] < 0]
    if remaining.size:
        groups[remaining] = label
    return groups
