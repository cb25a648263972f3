"""Canaries for one-run audits: crafted records, gradients or client updates, each put into
training with probability 1/2, whose presence the auditor then guesses.

* :class:`Canaries` — m crafted *directions* in a parameter space of dimension ``dim``:
  ``kind="gaussian"`` draws random unit vectors (in high dimension nearly orthogonal to each
  other and to everything else), ``kind="dirac"`` unit vectors on m distinct coordinates
  (the white-box gradient canaries of Steinke, Nasr & Jagielski 2023, section 6).
  - For federated runs they are *canary clients* (Andrew et al. 2024, "One-shot empirical
    privacy estimation for federated learning"; Maddock, Sablayrolles & Stock 2023, CANIFE):
    an included canary client takes part like any other client and sends
    ``canaries.update(i, norm)`` (set ``norm`` to the clipping bound: the largest update a
    client may contribute) whenever it is selected. The auditor sees the released aggregate
    updates A_t and scores canary i by sum_t <A_t, u_i>.
  - For white-box DP-SGD the same vectors are gradients added to the clipped sum of each
    step in which an included canary is sampled; the score is the same projection of the
    noisy gradient sums (or of the model's total change).
* :class:`CoordinateCanaries` — white-box gradient canaries realised as training records, so
  that an unmodified DP-SGD (``veil.learn.dpsgd``) trains on them: the data get m extra
  zero feature columns and canary j is a record whose only non-zero feature is column j of
  these (value 1, label ``label``). In a linear softmax model its gradient lives in the
  weights of that column alone, is clipped like any record's, and nothing else touches
  those weights except the DP noise: the Dirac canary of Steinke et al., with the auditor
  reading the change of the final weights.
* :class:`CanaryRecords` — black-box canaries in data space: records from a pool given a
  random *wrong* label, which a model can only fit by memorising them; scored by the loss
  attack on the trained model.

``included`` is drawn once, independently with probability 1/2 per canary, from ``rng``
(the independence the one-run theorem needs). Pass the scores and ``included`` to
:func:`veil.audit.one_run_epsilon_lower_bound`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_array, check_choice, check_int, check_positive, check_xy
from veil.audit.attacks import loss_scores
from veil.audit.one_run import OneRunBound, one_run_epsilon_lower_bound
from veil.errors import DataError
from veil.random import check_rng


@dataclass(frozen=True)
class Canaries:
    """m unit directions in R^dim and which canaries are included (see the module doc)."""

    included: np.ndarray = field(repr=False)
    dim: int
    kind: str
    directions: np.ndarray | None = field(default=None, repr=False)   # (m, dim), gaussian
    coordinates: np.ndarray | None = field(default=None, repr=False)  # (m,), dirac

    @property
    def m(self) -> int:
        return int(self.included.size)

    def update(self, i: int, norm: float = 1.0) -> np.ndarray:
        """The crafted update (or gradient) of canary ``i``: ``norm`` times its direction."""
        i = check_int(i, "i", low=0, high=self.m - 1)
        norm = check_positive(norm, "norm")
        if self.directions is not None:
            return norm * self.directions[i]
        out = np.zeros(self.dim)
        out[self.coordinates[i]] = norm
        return out

    def included_sum(self, norm: float = 1.0, mask: np.ndarray | None = None) -> np.ndarray:
        """Sum of the updates of the included canaries (restricted to ``mask`` if given, e.g.
        those sampled into a batch)."""
        take = self.included if mask is None else self.included & np.asarray(mask, bool)
        if self.directions is not None:
            return norm * self.directions[take].sum(axis=0)
        out = np.zeros(self.dim)
        np.add.at(out, self.coordinates[take], norm)
        return out

    def scores(self, aggregates) -> np.ndarray:
        """sum_t <A_t, u_i> for every canary: ``aggregates`` is (rounds, dim) or (dim,)."""
        a = check_array(aggregates, "aggregates", ndim=(1, 2))
        total = a if a.ndim == 1 else a.sum(axis=0)
        if total.size != self.dim:
            raise DataError(f"aggregates have dimension {total.size}; the canaries live in "
                            f"dimension {self.dim}")
        if self.directions is not None:
            return self.directions @ total
        return total[self.coordinates]

    def audit(self, aggregates, **options: Any) -> OneRunBound:
        """One-run epsilon lower bound from the aggregates (options: ``delta``,
        ``confidence``, ``guesses``)."""
        return one_run_epsilon_lower_bound(self.scores(aggregates), self.included, **options)


def make_canaries(m: int, dim: int, *, kind: str = "gaussian", rng=None) -> Canaries:
    """``m`` canaries in dimension ``dim``, each included with probability 1/2."""
    m = check_int(m, "m", low=1)
    dim = check_int(dim, "dim", low=1)
    check_choice(kind, "kind", ["gaussian", "dirac"])
    rng = check_rng(rng)
    included = rng.random(m) < 0.5
    if kind == "dirac":
        if m > dim:
            raise DataError(f"m={m} Dirac canaries need m distinct coordinates; dim={dim}")
        return Canaries(included, dim, kind, coordinates=rng.permutation(dim)[:m])
    directions = rng.standard_normal((m, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return Canaries(included, dim, kind, directions=directions)


@dataclass(frozen=True)
class CoordinateCanaries:
    """m canary records on m extra feature columns after ``features`` data columns."""

    included: np.ndarray = field(repr=False)
    features: int
    label: int = 0

    @property
    def m(self) -> int:
        return int(self.included.size)

    def pad(self, X) -> np.ndarray:
        """``X`` with the m (zero) canary columns appended, e.g. for test data."""
        X = check_array(X, "X", ndim=2)
        if X.shape[1] != self.features:
            raise DataError(f"X has {X.shape[1]} columns; these canaries follow "
                            f"{self.features} data columns")
        return np.hstack([X, np.zeros((X.shape[0], self.m))])

    def training_set(self, X, y) -> tuple[np.ndarray, np.ndarray]:
        """``(X, y)`` padded, plus one record per included canary (label ``label``)."""
        padded = self.pad(X)
        rows = np.flatnonzero(self.included)
        canaries = np.zeros((rows.size, padded.shape[1]))
        canaries[np.arange(rows.size), self.features + rows] = 1.0
        y = np.asarray(y)
        return (np.vstack([padded, canaries]),
                np.concatenate([y, np.full(rows.size, self.label, dtype=y.dtype)]))

    def scores(self, weight_change) -> np.ndarray:
        """Score of each canary from the change of a linear model's weights (classes, features
        + m) over training: its label's weight minus the mean of the other classes' weights,
        in the canary's column (a canary's clipped gradient raises exactly this)."""
        w = check_array(weight_change, "weight_change", ndim=2)
        if w.shape[1] != self.features + self.m or not 0 <= self.label < w.shape[0]:
            raise DataError(f"weight_change has shape {w.shape}; expected (classes > "
                            f"{self.label}, {self.features + self.m})")
        cols = w[:, self.features:]
        others = np.delete(cols, self.label, axis=0).mean(axis=0)
        return cols[self.label] - others

    def audit(self, weight_change, **options: Any) -> OneRunBound:
        """One-run epsilon lower bound from the change of the weights."""
        return one_run_epsilon_lower_bound(self.scores(weight_change), self.included, **options)


def coordinate_canaries(features: int, m: int, *, label: int = 0,
                        rng=None) -> CoordinateCanaries:
    """``m`` coordinate canaries after ``features`` data columns, each included with
    probability 1/2; ``label`` is the canaries' class index."""
    features = check_int(features, "features", low=0)
    m = check_int(m, "m", low=1)
    label = check_int(label, "label", low=0)
    return CoordinateCanaries(check_rng(rng).random(m) < 0.5, features, label)


@dataclass(frozen=True)
class CanaryRecords:
    """Mislabelled canary records ``(X, y)`` and which of them go into training."""

    X: np.ndarray = field(repr=False)
    y: np.ndarray = field(repr=False)
    included: np.ndarray = field(repr=False)

    def training_set(self, X, y) -> tuple[np.ndarray, np.ndarray]:
        """``(X, y)`` plus the included canaries."""
        X = check_array(X, "X", ndim=2)
        return (np.vstack([X, self.X[self.included]]),
                np.concatenate([np.asarray(y), self.y[self.included]]))

    def scores(self, model) -> np.ndarray:
        """The loss attack's score log p_y(x) of every canary under ``model``."""
        return loss_scores(model, self.X, self.y)

    def audit(self, model, **options: Any) -> OneRunBound:
        """One-run epsilon lower bound for ``model`` trained on :meth:`training_set`."""
        return one_run_epsilon_lower_bound(self.scores(model), self.included, **options)


def label_flip_canaries(X, y, m: int, *, rng=None) -> CanaryRecords:
    """``m`` records of ``(X, y)`` (a pool the training set does not otherwise use), each given
    a uniformly random label different from its own, and included with probability 1/2."""
    X, y = check_xy(X, y)
    m = check_int(m, "m", low=1, high=X.shape[0])
    classes = np.unique(y)
    if classes.size < 2:
        raise DataError("label-flip canaries need at least two classes in y")
    rng = check_rng(rng)
    rows = rng.permutation(X.shape[0])[:m]
    own = np.searchsorted(classes, y[rows])
    shift = rng.integers(1, classes.size, m)  # a uniformly random *other* class
    return CanaryRecords(X[rows], classes[(own + shift) % classes.size], rng.random(m) < 0.5)
