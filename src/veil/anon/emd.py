"""Earth mover's distances of t-closeness (Li, Li & Venkatasubramanian, ICDE 2007).

Each function takes the distributions ``P`` of the sensitive attribute in equivalence
classes (one row per class, columns in domain order) and the table's distribution ``q``,
and returns one distance per class, in [0, 1]:

* equal distance (every two values at distance 1): ``D = 1/2 sum_i |p_i - q_i|``;
* ordered distance for an ordered domain v_1 < ... < v_m, ground distance
  ``|i - j| / (m - 1)``: with ``r_i = p_i - q_i``,
  ``D = 1/(m-1) sum_{i=1}^{m} |r_1 + ... + r_i|``;
* hierarchical distance for a categorical attribute with a generalization tree of height
  H, ground distance ``level(LCA(v_i, v_j)) / H``: with ``extra(N) = sum of r over the
  leaves below N``, ``pos(N)``/``neg(N)`` the sums of the positive/negative ``extra`` of
  N's children, ``D = sum over inner nodes N of level(N)/H * min(pos(N), neg(N))``.
"""

from __future__ import annotations

import numpy as np

from veil.anon.hierarchy import Hierarchy

__all__ = ["equal_distance", "ordered_distance", "hierarchical_distance", "HierarchyTree"]


def equal_distance(P: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Equal-distance EMD (total variation distance)."""
    return 0.5 * np.abs(np.atleast_2d(P) - q).sum(axis=1)


def ordered_distance(P: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Ordered-distance EMD over a domain given in increasing order."""
    r = np.atleast_2d(P) - q
    m = r.shape[1]
    if m < 2:
        return np.zeros(r.shape[0])
    return np.abs(np.cumsum(r, axis=1)).sum(axis=1) / (m - 1)


class HierarchyTree:
    """A sensitive attribute's hierarchy restricted to the domain values, for the EMD.

    ``up[h]`` is the 0/1 matrix of nodes at level h (rows) below nodes at level h+1
    (levels count up from the leaves, which are the domain values in the given order).
    """

    def __init__(self, hierarchy: Hierarchy, domain_labels: np.ndarray,
                 column: str | None = None) -> None:
        pos = hierarchy.positions(domain_labels, column)
        self.height = hierarchy.height
        self.up: list[np.ndarray] = []
        prev, size = np.arange(len(pos)), len(pos)
        for level in range(1, hierarchy.n_levels):
            _, codes = np.unique(hierarchy.labels(level)[pos].astype(str), return_inverse=True)
            codes = codes.ravel()
            up = np.zeros((size, int(codes.max()) + 1))
            up[prev, codes] = 1.0
            self.up.append(up)
            prev, size = codes, up.shape[1]


def hierarchical_distance(P: np.ndarray, q: np.ndarray, tree: HierarchyTree) -> np.ndarray:
    """Hierarchical-distance EMD over the leaves of ``tree``."""
    extra = np.atleast_2d(P) - q
    total = np.zeros(extra.shape[0])
    if tree.height == 0:
        return total
    for level, up in enumerate(tree.up, start=1):
        pos = np.maximum(extra, 0) @ up
        neg = np.maximum(-extra, 0) @ up
        total += level / tree.height * np.minimum(pos, neg).sum(axis=1)
        extra = pos - neg
    return total
