"""Anatomy (Xiao & Tao, VLDB 2006): publish exact quasi-identifiers and the sensitive
values in two tables linked only by a group id.

Records are partitioned into QI-groups in which every sensitive value occurs at most once,
so each group of size >= l holds l distinct values and an adversary who knows a person's
group links them to a value with probability at most 1/l (l-diverse buckets). Such a
partition exists iff no sensitive value occurs in more than n/l records (eligibility).

Group creation, as in the paper: hash records into buckets by sensitive value; while at
least l buckets are non-empty, take one record from each of the l largest buckets to form
a group. Eligibility leaves at most l - 1 residual records, each the last of its bucket;
each joins a group that does not yet hold its value.
"""

from __future__ import annotations

import numpy as np

from veil._validation import check_int
from veil.errors import DataError
from veil.random import RngLike, check_rng

__all__ = ["anatomy_groups"]


def anatomy_groups(sensitive: np.ndarray, l: int, rng: RngLike = None) -> np.ndarray:
    """Group index of every record, given its sensitive value code (0..m-1).

    Which record of a bucket joins which group is drawn with ``rng`` (veil.random).
    """
    l = check_int(l, "l", low=1)
    codes = np.asarray(sensitive, dtype=np.int64)
    n = codes.size
    counts = np.bincount(codes)
    if counts.max() * l > n:
        raise DataError(f"no l-diverse anatomy exists for l={l}: a sensitive value occurs "
                        f"in {int(counts.max())} of {n} records, more than n/l = {n / l:.1f}")
    rng = check_rng(rng)
    order = np.lexsort((rng.random_raw(n), codes))       # buckets, shuffled within
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    taken = np.zeros(counts.size, dtype=np.int64)
    left = counts.copy()
    groups = np.full(n, -1, dtype=np.int64)
    members: list[np.ndarray] = []
    while np.count_nonzero(left) >= l:
        top = np.argpartition(-left, l - 1)[:l]
        rows = order[starts[top] + taken[top]]
        groups[rows] = len(members)
        members.append(top)
        taken[top] += 1
        left[top] -= 1
    held = np.array(members) if members else np.empty((0, l), dtype=np.int64)
    extended = np.zeros(len(members), dtype=bool)
    for value in np.flatnonzero(left):
        row = order[starts[value] + taken[value]]
        free = np.flatnonzero(~(held == value).any(axis=1))
        fresh = free[~extended[free]]
        target = int(fresh[0] if fresh.size else free[0])
        groups[row] = target
        extended[target] = True
    return groups
