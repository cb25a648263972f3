"""ID3 decision trees on categorical data, trained centrally or from (noisy) count queries.

ID3 (Quinlan 1986) grows a tree top-down: at a node holding records T with classes C it
splits on the attribute A of largest information gain

    Gain(A) = H(C | T) - sum_{a in A} (|T_a| / |T|) H(C | T_a),   H = -sum_c p_c log2 p_c,

one child per value of A, A removed below; a node becomes a leaf labelled with its
majority class when the depth limit is reached, no attribute is left, it is pure, it holds
fewer than ``min_samples_split`` records or no attribute has positive gain (a child with
no records is labelled with its parent's majority).

Everything ID3 needs from the data is a count table per node: the class counts ``N_c`` and,
for every remaining attribute A, the counts ``N_{a,c}`` per (value, class). :class:`ID3Queries`
asks for them as one aggregate query per depth, over all the nodes at that depth
(a record reaches one node and adds 1 to its class count and to one cell per remaining
attribute, so the query's L1 sensitivity is ``|A_left| + 1`` and its L2 ``sqrt(|A_left| + 1)``;
the nodes of one depth partition the records, which is parallel composition expressed as
sensitivity). With noisy counts it follows Friedman & Schuster ("Data mining with
differential privacy", KDD 2010, SuLQ-based ID3): negative counts are read as 0, a node
becomes a leaf when ``N_T / (t |C|)`` is below the noise's standard deviation (t the
largest number of values of a remaining attribute; their rule with the Laplace standard
deviation sqrt(2)/epsilon), and the budget is split evenly over the d + 1 depths, the
leaves at depth d asking only for class counts (:func:`veil.fl.hybrid.fit.fit_queries`
calibrates the noise so that every depth costs the same).

:class:`ID3Classifier` is the central, scikit-learn style learner; its ``fit`` runs the very
same :class:`ID3Queries` with exact counts, so the query-based tree without noise *is* the
central tree (tested with the counts summed over partitioned parties).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from veil._validation import check_int
from veil.errors import ConfigError, DataError
from veil.learn.model_format import register_model_class
from veil.learn.queries import Query, QueryAnswer, QueryLearner, QueryShape, checked_values

__all__ = ["ID3Classifier", "ID3Queries", "Node", "count_table"]

_GAIN_TOL = 1e-12


@register_model_class
@dataclass
class Node:
    """A tree node: its class counts (as seen, noisy in private training), its label, and,
    unless a leaf (``feature == -1``), the split attribute and a child per value."""

    depth: int
    label: int
    counts: np.ndarray
    feature: int = -1
    children: dict[int, int] = field(default_factory=dict)


def _check_codes(X: Any, cardinalities: Sequence[int]) -> np.ndarray:
    """Categorical features as int64 codes in ``[0, cardinality)`` (DataError otherwise)."""
    try:
        arr = np.asarray(X)
        codes = arr.astype(np.int64)
    except (TypeError, ValueError):
        raise DataError("X must hold integer category codes") from None
    if arr.ndim != 2 or arr.shape[1] != len(cardinalities):
        raise DataError(f"X has shape {arr.shape}; expected (n, {len(cardinalities)}) "
                        "integer category codes")
    if not np.array_equal(codes, arr):
        raise DataError("X must hold integer category codes")
    bad = (codes < 0) | (codes >= np.asarray(cardinalities, dtype=np.int64))
    if np.any(bad):
        row, col = (int(v[0]) for v in np.nonzero(bad))
        raise DataError(f"X[{row}, {col}]={codes[row, col]} is outside the categories "
                        f"0..{cardinalities[col] - 1} of feature {col}")
    return codes


def _class_codes(y: Any, classes: np.ndarray, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y has shape {y.shape}; expected ({n},)")
    codes = np.clip(np.searchsorted(classes, y), 0, classes.size - 1)
    if np.any(classes[codes] != y):
        unknown = sorted({str(v) for v in y[classes[codes] != y]})[:5]
        raise DataError(f"y holds labels outside the classes {classes.tolist()}: {unknown}")
    return codes


def _remaining(path: Sequence[int], n_features: int) -> list[int]:
    used = set(path[0::2])
    return [a for a in range(n_features) if a not in used]


def count_table(paths: Sequence[Sequence[int]], split: bool, X: np.ndarray, codes: np.ndarray,
                cardinalities: Sequence[int], n_classes: int) -> np.ndarray:
    """The counts of the records ``(X, codes)`` at each node of ``paths``.

    A path is the flat list ``[a_1, v_1, a_2, v_2, ...]`` of the (attribute, value) tests
    from the root. Per node: the class counts, then (if ``split``) for each remaining
    attribute in increasing order its ``cardinality x n_classes`` counts, row-major.
    """
    out = []
    k = n_classes
    for path in paths:
        mask = np.ones(X.shape[0], dtype=bool)
        for a, v in zip(path[0::2], path[1::2]):
            mask &= X[:, a] == v
        yc = codes[mask]
        out.append(np.bincount(yc, minlength=k))
        if split:
            rows = X[mask]
            for a in _remaining(path, X.shape[1]):
                out.append(np.bincount(rows[:, a] * k + yc, minlength=cardinalities[a] * k))
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def _entropy(counts: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of non-negative counts (0 for an empty row)."""
    total = counts.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, counts / np.where(total > 0, total, 1), 0.0)
        terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1)), 0.0)
    return terms.sum(axis=-1)


def _gain(class_counts: np.ndarray, table: np.ndarray) -> float:
    """Information gain of a split with per-(value, class) ``table`` (counts >= 0)."""
    per_value = table.sum(axis=1)
    total = per_value.sum()
    if total <= 0:
        return 0.0
    return float(_entropy(class_counts) - (per_value / total) @ _entropy(table))


class ID3Queries(QueryLearner):
    """ID3 grown from one count query per depth (module docstring).

    ``cardinalities``: number of values of each categorical feature, ``classes``: the class
    labels (public schema knowledge). ``max_records`` bounds one party's record count, hence
    its counts.
    """

    def __init__(self, cardinalities: Sequence[int], classes: Sequence[Any], *,
                 max_depth: int = 5, min_samples_split: int = 2,
                 max_records: int = 2 ** 20) -> None:
        self.cardinalities = [check_int(c, f"cardinalities[{i}]", low=1)
                              for i, c in enumerate(cardinalities)]
        if not self.cardinalities:
            raise ConfigError("cardinalities=[] is not allowed: need at least one feature")
        self.classes = np.unique(np.asarray(classes))
        if self.classes.size < 2:
            raise ConfigError(f"classes={list(classes)!r}: need at least two classes")
        self.max_depth = check_int(max_depth, "max_depth", low=0)
        self.min_samples_split = check_int(min_samples_split, "min_samples_split", low=1)
        self.max_records = check_int(max_records, "max_records", low=1)
        self.depth_limit = min(self.max_depth, len(self.cardinalities))
        self.nodes: list[Node] = []
        # pending nodes: (path, parent index, value from the parent, parent's label)
        self.frontier: list[tuple[tuple[int, ...], int, int, int]] = [((), -1, -1, 0)]
        self.depth = 0

    def _shape(self, depth: int, size: int = 0) -> QueryShape:
        sens = len(self.cardinalities) - depth + 1 if depth < self.depth_limit else 1
        return QueryShape(size=size, l1=float(sens), l2=math.sqrt(sens),
                          bound=float(self.max_records), integer=True)

    def plan(self) -> list[QueryShape]:
        return [self._shape(d) for d in range(self.depth_limit + 1)]

    def next_query(self) -> Query | None:
        if not self.frontier:
            return None
        split = self.depth < self.depth_limit
        k = self.classes.size
        size = sum(k + (k * sum(self.cardinalities[a] for a in
                                _remaining(path, len(self.cardinalities))) if split else 0)
                   for path, *_ in self.frontier)
        paths = [list(path) for path, *_ in self.frontier]
        return Query(f"id3 depth {self.depth} ({len(paths)} nodes)",
                     self._shape(self.depth, size), {"paths": paths, "split": split})

    def answer(self, query: Query, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
        codes = _check_codes(X, self.cardinalities)
        labels = _class_codes(y, self.classes, codes.shape[0])
        counts = count_table(query.spec["paths"], bool(query.spec["split"]), codes, labels,
                             self.cardinalities, self.classes.size)
        return counts, 0

    def update(self, query: Query, aggregate: QueryAnswer) -> None:
        values = np.maximum(checked_values(query, aggregate), 0.0)
        split = bool(query.spec["split"])
        k = self.classes.size
        offset = 0
        frontier = []
        for path, parent, value, parent_label in self.frontier:
            class_counts = values[offset:offset + k]
            offset += k
            tables = {}
            if split:
                for a in _remaining(path, len(self.cardinalities)):
                    size = self.cardinalities[a] * k
                    tables[a] = values[offset:offset + size].reshape(-1, k)
                    offset += size
            node = self._decide(class_counts, tables, parent_label, aggregate.noise_std)
            index = len(self.nodes)
            self.nodes.append(node)
            if parent >= 0:
                self.nodes[parent].children[value] = index
            if node.feature >= 0:
                frontier.extend((path + (node.feature, v), index, v, node.label)
                                for v in range(self.cardinalities[node.feature]))
        self.frontier = frontier
        self.depth += 1

    def _decide(self, class_counts: np.ndarray, tables: dict[int, np.ndarray],
                parent_label: int, noise_std: float) -> Node:
        total = float(class_counts.sum())
        label = int(np.argmax(class_counts)) if total > 0 else parent_label
        node = Node(self.depth, label, class_counts.copy())
        if not tables or total < self.min_samples_split or \
                np.count_nonzero(class_counts) <= 1:
            return node
        widest = max(self.cardinalities[a] for a in tables)
        if total / (widest * self.classes.size) < noise_std:   # Friedman & Schuster's rule
            return node
        attributes = sorted(tables)
        gains = [_gain(class_counts, tables[a]) for a in attributes]
        best = int(np.argmax(gains))
        if gains[best] > _GAIN_TOL:
            node.feature = attributes[best]
        return node

    @property
    def model(self) -> ID3Classifier:
        tree = ID3Classifier(max_depth=self.max_depth, min_samples_split=self.min_samples_split,
                             cardinalities=list(self.cardinalities))
        tree.classes_ = self.classes
        tree.n_features_in_ = len(self.cardinalities)
        tree.cardinalities_ = list(self.cardinalities)
        tree.tree_ = list(self.nodes) or [Node(0, 0, np.zeros(self.classes.size))]
        return tree


@register_model_class
class ID3Classifier(ClassifierMixin, BaseEstimator):
    """ID3 on integer-coded categorical features, trained on data held in one place.

    ``cardinalities``: values per feature (None: ``max code + 1`` of the training data).
    Learned: ``tree_`` (list of :class:`Node`, the root first), ``classes_``,
    ``n_features_in_``, ``cardinalities_``.
    """

    def __init__(self, max_depth: int = 5, min_samples_split: int = 2,
                 cardinalities: Sequence[int] | None = None) -> None:
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.cardinalities = cardinalities

    def fit(self, X: Any, y: Any) -> ID3Classifier:
        arr = np.asarray(X)
        if arr.ndim != 2 or arr.shape[0] == 0:
            raise DataError(f"X has shape {arr.shape}; expected a non-empty (n, d) array")
        cards = self.cardinalities
        if cards is None:
            cards = (_check_codes(arr, [2 ** 62] * arr.shape[1]).max(axis=0) + 1).tolist()
        learner = ID3Queries(cards, np.unique(np.asarray(y)), max_depth=self.max_depth,
                             min_samples_split=self.min_samples_split)
        while (query := learner.next_query()) is not None:
            counts, _ = learner.answer(query, arr, y)
            learner.update(query, QueryAnswer(counts.astype(np.float64)))
        fitted = learner.model
        for name in ("classes_", "n_features_in_", "cardinalities_", "tree_"):
            setattr(self, name, getattr(fitted, name))
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "tree_"):
            raise ConfigError("this ID3Classifier is not fitted yet: call fit(X, y) first")

    def predict(self, X: Any) -> np.ndarray:
        """The class of the leaf each row reaches (an unseen value stops at its node)."""
        self._check_fitted()
        codes = _check_codes(X, self.cardinalities_)
        out = np.empty(codes.shape[0], dtype=np.intp)
        stack = [(0, np.arange(codes.shape[0]))]
        while stack:
            index, rows = stack.pop()
            node = self.tree_[index]
            if node.feature < 0 or rows.size == 0:
                out[rows] = node.label
                continue
            values = codes[rows, node.feature]
            routed = np.zeros(rows.size, dtype=bool)
            for v, child in node.children.items():
                hit = values == v
                routed |= hit
                stack.append((child, rows[hit]))
            out[rows[~routed]] = node.label
        return self.classes_[out]

    @property
    def depth_(self) -> int:
        """Depth of the deepest leaf."""
        self._check_fitted()
        return max(n.depth for n in self.tree_)

    def structure(self) -> list[tuple[int, int, int, dict[int, int]]]:
        """``(depth, feature, label, children)`` of every node: what two trees share when
        they are the same tree."""
        self._check_fitted()
        return [(n.depth, n.feature, n.label, dict(n.children)) for n in self.tree_]
