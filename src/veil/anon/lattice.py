"""Optimal full-domain generalization: a bounded search over the generalization lattice.

The lattice holds every transformation (one level per quasi-identifier); x <= y when every
level of x is at most y's. The search returns the transformation that satisfies the privacy
models within the suppression limit ("anonymous") with the least loss, ties broken by the
lower lattice height (as ARX does). It is exact, and prunes in four ways:

* **predictive tagging** (Samarati 2001; Flash, Kohlmayer et al. 2012) on the models that
  are monotone under the suppression limit (:mod:`veil.anon.models`; all of them without
  suppression). k-anonymity with at most s suppressed records is monotone: if node x
  leaves at most s records in classes smaller than k, a generalization y >= x merges each
  class of x into one class of y, at least as large, so every record kept at x (in a class
  of size >= k) is in a class of size >= k at y too; the records y must suppress are a
  subset of those x suppresses, at most s. (Distinct l-diversity likewise: a merged class
  holds every value of its parts.) So a node that satisfies these models makes all its
  generalizations satisfy them, and a node that does not makes all its specializations
  fail (and so non-anonymous whatever the other models say). An unknown node is resolved
  Flash-style: a path is built upwards from it through unknown nodes and binary-searched
  for the lowest node that satisfies the monotone models, so that few nodes are ever
  checked (under suppression with a non-monotonic metric the path stops where the bounds
  leave the race and its top is checked first: see :meth:`LatticeSearch._resolve`). The
  other models (entropy or recursive l-diversity, t-closeness under suppression) are
  checked only on nodes that pass the monotone ones, and only on the classes those keep.
  They are not monotone, but a class that fails one still forces suppression below it:
  split into parts, the parts that satisfy entropy l-diversity (concave) or t-closeness
  (convex EMD) can hold only part of its records
  (:meth:`~veil.anon.models.PrivacyModel.assess`), so a node whose forced suppression
  exceeds the limit makes all its specializations non-anonymous too.
* **utility bounds** — best first: the next node is the one with the least lower bound of
  its loss. Bounds start static (:class:`~veil.anon.metrics.Objective`: for non-uniform
  entropy the loss without suppression; for DM* ``n^2 / possible classes``) and are
  raised by every checked node, anonymous or not: its classes bound the loss of all its
  generalizations (DM*: ``sum c max(c, k)``), and the records it must suppress are
  suppressed by all its specializations too, which bounds what suppression adds there
  (non-uniform entropy: their entropy; DM*: ``n k + (n - k) t`` for t of them). Every
  anonymous node checked, also on the way to another, is a candidate. The search stops
  when no node's bound is below the best loss found.
* **dominance** — when the loss is monotone among anonymous nodes (no suppression, or
  ARX's monotonic variants), an anonymous node's loss bounds all its generalizations, and
  a node with an anonymous direct specialization is skipped.
* **roll-up** (Incognito, LeFevre et al. 2005) — a node's classes are computed from the
  smallest class table of an already checked specialization, not from the rows
  (:meth:`~veil.anon.encoding.EncodedTable.rollup`: a few table look-ups and a grouping
  in O(classes) per check).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from veil.anon.encoding import ClassTable, EncodedColumn, EncodedTable
from veil.anon.metrics import Objective
from veil.anon.models import PrivacyModel
from veil.anon.risk import SampleModel, enforce
from veil.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["Evaluation", "LatticeSearch", "SearchResult", "Unsatisfiable"]

#: the largest lattice searched (its node table must fit in memory)
MAX_NODES = 2_000_000
#: class-table rows kept as roll-up sources; beyond it the largest tables are dropped (and
#: rebuilt from a finer one if needed again)
CACHE_ROWS = 200_000


@dataclass
class Evaluation:
    """A checked transformation: its classes, which are kept, and whether it is anonymous.

    ``table`` and ``kept`` may be dropped (None) to bound memory; they are rebuilt on use.
    """

    levels: np.ndarray
    table: ClassTable | None
    kept: np.ndarray | None
    suppressed: int
    anonymous: bool


@dataclass
class SearchResult:
    evaluation: Evaluation
    loss: float
    nodes: int
    checked: int


class Unsatisfiable(Exception):  # noqa: N818 - internal signal, turned into a DataError
    """No transformation is anonymous; ``top`` is the most general one's evaluation."""

    def __init__(self, top: Evaluation) -> None:
        super().__init__("no anonymous transformation")
        self.top = top


def _top_codes(col: EncodedColumn) -> np.ndarray:
    top = str(col.hierarchy.labels(col.hierarchy.n_levels - 1)[0])
    return np.array([int(np.flatnonzero(labels == top)[0]) if (labels == top).any() else -1
                     for labels in col.labels])


class LatticeSearch:
    """One search over the lattice of an encoded table."""

    def __init__(self, enc: EncodedTable, models: Sequence[PrivacyModel], max_suppressed: int,
                 objective: Objective) -> None:
        self.enc = enc
        self.models = list(models)
        self.max_suppressed = int(max_suppressed)
        self.objective = objective
        shape = enc.heights + 1
        size = math.prod(int(s) for s in shape)
        if size > MAX_NODES:
            raise ConfigError(f"the generalization lattice has {size:,} transformations "
                              f"(more than {MAX_NODES:,}): use fewer quasi-identifiers, "
                              "shorter hierarchies, or algorithm='mondrian'")
        self.nodes = np.indices(shape).reshape(len(shape), -1).T.astype(np.int64)
        # the same levels in the smallest integer type, for the masks of generalizations
        # and specializations (a comparison over the lattice runs several times faster)
        self._grid = self.nodes.astype(np.min_scalar_type(int(enc.heights.max())))
        self.strides = np.array([math.prod(int(s) for s in shape[j + 1:])
                                 for j in range(len(shape))], dtype=np.int64)
        self.height = self.nodes.sum(axis=1)
        # the direct generalizations of each node (one level up in one attribute), in
        # increasing index order, -1 where an attribute is at its top
        raised = np.arange(size)[:, None] + self.strides[::-1]
        self._successors = np.where(self.nodes[:, ::-1] < enc.heights[::-1], raised, -1)
        # 1 / -1 / 0: anonymous / not / unknown, for all models (status) and for the models
        # that stay monotone under the suppression limit (monotone: always safe to tag)
        self.status = np.zeros(size, dtype=np.int8)
        self.monotone = np.zeros(size, dtype=np.int8)
        # models are monotone as they declare (PrivacyModel.monotone without suppression,
        # monotone_with_suppression with it); the models of the whole table (SampleModel)
        # act after the others, so they count as monotone only after monotone ones
        def monotone(model: PrivacyModel) -> bool:
            return model.monotone_with_suppression if self.max_suppressed else model.monotone

        self._sample_models = [m for m in self.models if isinstance(m, SampleModel)]
        per_class = [m for m in self.models if not isinstance(m, SampleModel)]
        self._mono_models = [m for m in per_class if monotone(m)]
        self._other_models = [m for m in per_class if not monotone(m)]
        self._sample_monotone = not self._other_models and all(
            monotone(m) for m in self._sample_models)
        self.tagging = not self._other_models and self._sample_monotone
        self.k = max(m.min_class_size for m in self.models)
        # per attribute and level, the code of the hierarchy's top label (-1 if absent):
        # a class all at the top is completely generalized, which the models of the whole
        # table leave out (as ARX does)
        self._top_codes = [_top_codes(col) for col in enc.columns]
        for model in self.models:
            model.attach(enc)
        # static lower bounds of the loss, a lower bound of what suppression adds to them
        # (see evaluate), and the best lower bound known: the larger of ``bound +
        # penalty`` and the bounds raised by checked nodes
        self.bound = objective.static_bounds(self.nodes, self.k, self.max_suppressed)
        self.penalty = np.zeros(size)
        self.lower = self.bound.astype(np.float64)
        self.monotone_loss = objective.monotone(self.max_suppressed)
        # the best anonymous node checked so far: (loss, height, index)
        self.best: tuple[float, int, int] = (math.inf, 0, -1)
        self._scored: set[int] = set()
        self._evaluated: dict[int, Evaluation] = {}
        # the nodes whose class tables are kept as roll-up sources, and their sizes
        self._cached = np.zeros(size, dtype=bool)
        self._cached_rows = np.zeros(size, dtype=np.int64)
        self._cached_total = 0

    # -- checking one node ----------------------------------------------------------------
    def _classes(self, levels: np.ndarray, below: np.ndarray) -> tuple[
            ClassTable, np.ndarray, np.ndarray, int, int, int]:
        """Classes at ``levels`` (rolled up from the smallest cached specialization, among
        ``below``), which classes all models keep, which the monotone models alone keep,
        the records these suppress, the records all models suppress, and how many records
        every specialization must suppress (:meth:`PrivacyModel.assess`)."""
        sources = np.flatnonzero(self._cached & below)
        if sources.size:
            source = self._evaluated[int(sources[np.argmin(self._cached_rows[sources])])]
            table = self.enc.rollup(source.table, source.levels, levels)
        else:
            table = self.enc.rollup(self.enc.bottom(), self.nodes[0], levels)
        domain = self.enc.sensitive
        kept = np.ones(len(table), dtype=bool)
        for model in self._mono_models:
            kept &= model.check(levels, table, domain)
        mono_kept = kept.copy() if self._other_models else kept
        forced = mono_gone = suppressed = int(table.counts.sum(where=~kept))
        if self._other_models and forced <= self.max_suppressed:
            # the other models only decide among the classes the monotone ones keep
            rows = np.flatnonzero(kept)
            ok = np.ones(rows.size, dtype=bool)
            least = np.zeros(rows.size, dtype=np.int64)
            for model in self._other_models:
                ok_m, least_m = model.assess_at(levels, table, rows, domain)
                ok &= ok_m
                least = np.maximum(least, least_m)
            kept[rows[~ok]] = False
            forced += int(least.sum())
            suppressed = int(table.counts.sum(where=~kept))
        if self._sample_models and suppressed <= self.max_suppressed:
            kept = enforce(self._sample_models, table.counts, kept,
                           self._suppressible(levels, table),
                           self._tie_order(levels, table), self.max_suppressed)
            suppressed = int(table.counts.sum(where=~kept))
            if self._sample_monotone:
                mono_gone = suppressed
                forced = max(forced, suppressed)
        return table, kept, mono_kept, mono_gone, suppressed, forced

    def _suppressible(self, levels: np.ndarray, table: ClassTable) -> np.ndarray:
        """Every class but the completely generalized one."""
        complete = np.ones(len(table), dtype=bool)
        for j, level in enumerate(levels):
            complete &= table.codes[:, j] == self._top_codes[j][level]
        return ~complete

    def _tie_order(self, levels: np.ndarray, table: ClassTable):
        """How classes of equal size are ordered for suppression: by the objective's
        :meth:`~veil.anon.metrics.Objective.class_order`, then first record (ARX)."""
        def order(rows: np.ndarray) -> np.ndarray:
            secondary = self.objective.class_order(levels, table, rows)
            first = table.first[rows]
            return np.lexsort((first,) if secondary is None else (first, secondary))
        return order

    def _cache(self, idx: int, ev: Evaluation) -> None:
        """Keep ``ev``'s table as a roll-up source, dropping the largest ones over budget."""
        self._cached[idx] = True
        self._cached_rows[idx] = len(ev.table)
        self._cached_total += len(ev.table)
        while self._cached_total > CACHE_ROWS:
            sizes = np.where(self._cached, self._cached_rows, -1)
            sizes[idx] = -1                                      # never the newest
            drop = int(np.argmax(sizes))
            if sizes[drop] < 0:
                break
            old = self._evaluated[drop]
            old.table = old.kept = None
            self._cached[drop] = False
            self._cached_total -= int(self._cached_rows[drop])

    def evaluate(self, idx: int) -> Evaluation:
        """Check node ``idx``: its classes, suppression and anonymity; tag what follows."""
        ev = self._evaluated.get(idx)
        if ev is not None:
            if ev.table is None:
                ev.table, ev.kept = self._classes(ev.levels, self._below(ev.levels))[:2]
                self._cache(idx, ev)
            return ev
        levels = self.nodes[idx]
        below = self._below(levels)
        table, kept, mono_kept, mono_gone, suppressed, forced = self._classes(levels, below)
        mono_ok = mono_gone <= self.max_suppressed
        ev = Evaluation(levels, table, kept, suppressed, suppressed <= self.max_suppressed)
        self._evaluated[idx] = ev
        self._cache(idx, ev)
        lift = self.objective.lift_bound(table, self.k)
        above = self._above(levels) if mono_ok or lift is not None else None
        if mono_ok:
            self.monotone[above] = 1
        else:
            self.monotone[below] = -1
            self.status[below] = -1
        if self.tagging:
            self.status[:] = self.monotone
        else:
            self.status[idx] = 1 if ev.anonymous else -1
        if lift is not None:
            self._raise(above, lift)
        if forced > self.max_suppressed:
            # every specialization suppresses at least ``forced`` records: none is anonymous
            # (so their bounds no longer matter)
            self.status[below] = -1
        elif forced:
            # ... among them all those the monotone models suppress here (their classes
            # only split)
            cost = self.objective.suppression_bound(table, ~mono_kept)
            np.maximum(self.penalty, cost, out=self.penalty, where=below)
            np.maximum(self.lower, self.bound + self.penalty, out=self.lower, where=below)
            self._raise(below, self.objective.suppression_floor(forced, self.k))
        self._score(idx)
        return ev

    def _score(self, idx: int) -> None:
        """Offer a checked anonymous node as the optimum: every one is a candidate (also
        those checked on the way to others), scored once and only if its bound may
        still beat the best."""
        ev = self._evaluated[idx]
        if not ev.anonymous or idx in self._scored or not self._promising(idx):
            return
        self._scored.add(idx)
        if ev.table is None:
            self.evaluate(idx)
        loss = self.objective.loss(ev.levels, ev.table, ev.kept)
        self.best = min(self.best, (loss, int(self.height[idx]), idx))
        if self.monotone_loss:
            self._raise(self._above(ev.levels), loss)

    def _promising(self, idx: int) -> bool:
        return (self.lower[idx], int(self.height[idx])) < self.best[:2]

    def _above(self, levels: np.ndarray) -> np.ndarray:
        """Mask of the generalizations of ``levels`` (itself included)."""
        return (self._grid >= levels.astype(self._grid.dtype)).all(axis=1)

    def _below(self, levels: np.ndarray) -> np.ndarray:
        """Mask of the specializations of ``levels`` (itself included)."""
        return (self._grid <= levels.astype(self._grid.dtype)).all(axis=1)

    def _raise(self, mask: np.ndarray, value: float) -> None:
        np.maximum(self.lower, value, out=self.lower, where=mask)

    def _resolve(self, idx: int) -> None:
        """Find out whether ``idx`` is anonymous, checking as few nodes as possible.

        The monotone models are resolved Flash-style along a path built upwards from
        ``idx`` through nodes unknown to them (cheapest bound first), binary-searched for
        its lowest node that satisfies them. With a monotone loss the path runs to the
        top, as in Flash: the anonymous node found bounds the loss of all above it.
        Otherwise (suppression with a non-monotonic metric) the path stops where the
        bounds leave the race, and its top is checked first: most nodes that matter are
        then non-anonymous, and a top that fails the monotone models proves the whole
        path (and all below it) non-anonymous in one check. The other models, if any,
        are resolved by checking the node itself.
        """
        if self.monotone[idx] == 0:
            path = [idx]
            while True:
                up = self._successors[path[-1]]
                up = up[up >= 0]
                keep = self.monotone[up] == 0
                if not self.monotone_loss:
                    best_loss, best_height, _ = self.best
                    lower = self.lower[up]
                    keep &= (lower < best_loss) | ((lower == best_loss)
                                                   & (self.height[up] < best_height))
                up = up[keep]
                if not up.size:
                    break
                path.append(int(up[np.argmin(self.bound[up])]))    # ties: the least index
            lo, hi = 0, len(path) - 1
            if not self.monotone_loss:
                self.evaluate(path[hi])
                lo, hi = (hi + 1, hi) if self.monotone[path[hi]] < 0 else (0, hi - 1)
            while lo <= hi:
                mid = (lo + hi) // 2
                if self.monotone[path[mid]] == 0:
                    self.evaluate(path[mid])
                if self.monotone[path[mid]] > 0:
                    hi = mid - 1
                else:
                    lo = mid + 1
        if self.status[idx] == 0:
            self.evaluate(idx)

    def _dominated(self, idx: int) -> bool:
        """A direct specialization is known anonymous (so, being monotone, no worse)."""
        return any(self.nodes[idx, j] > 0 and self.status[idx - self.strides[j]] > 0
                   for j in range(len(self.strides)))

    # -- the search -------------------------------------------------------------------------
    def run(self) -> SearchResult:
        top = self.evaluate(len(self.nodes) - 1)
        if self.monotone[-1] < 0:
            raise Unsatisfiable(top)
        open_ = np.ones(len(self.nodes), dtype=bool)
        while True:
            # best first: the open node with the least lower bound (then the least height)
            # that is not known to be non-anonymous and may still beat the best
            lower = np.where(open_ & (self.status >= 0), self.lower, math.inf)
            least = lower.min()
            ids = np.flatnonzero(lower == least)
            idx = int(ids[np.argmin(self.height[ids])])
            if least == math.inf or (least, int(self.height[idx])) >= self.best[:2]:
                break
            if self.status[idx] == 0:
                self._resolve(idx)        # may raise bounds: choose again
                continue
            open_[idx] = False
            if idx in self._evaluated:
                self._score(idx)
            elif not (self.monotone_loss and self._dominated(idx)):
                self.evaluate(idx)                # anonymous: scored
        best_loss, _, best_idx = self.best
        if best_idx < 0:
            raise Unsatisfiable(self.evaluate(len(self.nodes) - 1))
        log.info("lattice of %d nodes: %d checked, optimum %s (loss %.10g)", len(self.nodes),
                 len(self._evaluated), self.nodes[best_idx].tolist(), best_loss)
        return SearchResult(self.evaluate(best_idx), best_loss, len(self.nodes),
                            len(self._evaluated))
