"""Membership audits of the experiments' models: audit records whose membership a coin decides.

The one-run audit (Steinke, Nasr & Jagielski 2023, :func:`veil.audit.one_run_epsilon_lower_bound`)
lower-bounds epsilon from a single training run, provided each audit record is in the training
data with probability 1/2, independently of everything else, decided *before* training, while
the rest of the data is fixed. :class:`AuditPool` draws that: ``size`` records of a training set
chosen uniformly, and a fair coin for each. The training set is split between the parties as
usual (the split does not look at the coins); then every party drops its pool records whose
coin came up tails (:meth:`AuditPool.party_data`). A coin therefore decides only whether one
record is added to its own party's data -- the add/remove-one-record neighbouring relation
the Ledger's guarantee is stated for, so the report's bound on these records is valid, not an
approximation as with a fixed train/test split.

After training, every pool record is scored by the loss attack (Yeom, Giacomelli, Fredrikson
& Jha 2018: score log p_y(x), higher = member; :func:`veil.audit.loss_scores`). It needs only the
released model -- no shadow models -- and is the attack that fits models which expose class
probabilities: the linear models and networks through ``predict_proba``, the ID3 tree through
the class counts it holds at each node (:class:`LeafFrequencies`). The heads' scores are the
member scores and the tails' the non-member scores of the run directory
(:mod:`veil.audit.rundir`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil._validation import check_int
from veil.audit import loss_scores
from veil.errors import DataError
from veil.learn.tree import ID3Classifier
from veil.random import RngLike, check_rng

__all__ = ["AuditPool", "LeafFrequencies", "membership_scores"]


class LeafFrequencies:
    """The class probabilities of a fitted ID3 tree: the class counts the tree holds at the
    node where a record stops, add-one (Laplace) smoothed so that no class has probability 0.

    After private training the counts are the noisy ones the tree was grown from (negative
    counts read as 0, as :class:`~veil.learn.tree.ID3Queries` reads them); they are part of the
    released tree, so these probabilities are post-processing of the private output. A record
    is routed by the tree's own ``predict``, on a copy whose nodes are labelled by their index.
    """

    def __init__(self, tree: ID3Classifier) -> None:
        if not hasattr(tree, "tree_"):
            raise DataError("the ID3 tree is not fitted: nothing to score")
        self.classes_ = tree.classes_
        self._router = copy.copy(tree)
        self._router.tree_ = [dataclasses.replace(node, label=i)
                              for i, node in enumerate(tree.tree_)]
        self._router.classes_ = np.arange(len(tree.tree_))
        counts = np.maximum(np.stack([node.counts for node in tree.tree_]), 0.0) + 1.0
        self._proba = counts / counts.sum(axis=1, keepdims=True)

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n, classes) probabilities: the smoothed class frequencies of each row's node."""
        return self._proba[self._router.predict(X)]


def membership_scores(model: Any, X: Any, y: Any) -> np.ndarray:
    """The loss attack's score log p_y(x) of each record under ``model`` (an ID3 tree is
    scored through :class:`LeafFrequencies`)."""
    return loss_scores(LeafFrequencies(model) if isinstance(model, ID3Classifier) else model,
                       X, y)


@dataclasses.dataclass(frozen=True)
class AuditPool:
    """``rows``: the audit records' positions in a training set of ``n`` records;
    ``included``: their coins (True: trained on). See the module docstring."""

    n: int
    rows: np.ndarray = dataclasses.field(repr=False)
    included: np.ndarray = dataclasses.field(repr=False)

    @classmethod
    def draw(cls, n: int, size: int, *, rng: RngLike = None) -> AuditPool:
        """``size`` of the ``n`` training records, uniformly, each with a fair coin."""
        n = check_int(n, "n", low=2)
        size = check_int(size, "audit_records", low=2, high=n)
        rng = check_rng(rng)
        rows = np.sort(rng.permutation(n)[:size])
        return cls(n, rows, np.asarray(rng.bernoulli(0.5, size), dtype=bool))

    @property
    def withheld(self) -> np.ndarray:
        """Positions of the records the coins keep out of training."""
        return self.rows[~self.included]

    def party_data(self, X: Any, y: Any, parts: Sequence[np.ndarray]
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each party's ``(X, y)``: the rows of its part, less the withheld audit records."""
        if len(y) != self.n:
            raise DataError(f"the training set has {len(y)} records; this audit pool was drawn "
                            f"for {self.n}")
        keep = np.ones(self.n, dtype=bool)
        keep[self.withheld] = False
        return [(X[p[keep[p]]], y[p[keep[p]]]) for p in parts]

    def scores(self, model: Any, X: Any, y: Any) -> dict[str, np.ndarray]:
        """The loss attack on the audit records of training set ``(X, y)``: member scores
        (coin heads) and non-member scores (tails), as a run directory stores them."""
        s = membership_scores(model, X[self.rows], y[self.rows])
        return {"member_scores": s[self.included], "nonmember_scores": s[~self.included]}
