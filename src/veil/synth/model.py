"""A graphical model fitted to noisy marginals (Private-PGM), and sampling from it.

Private-PGM (McKenna, Sheldon & Miklau 2019, "Graphical-model based estimation and
inference for differential privacy", ICML): given noisy marginals ``y_r = M_r(D) + N(0,
sigma_r^2 I)`` on attribute sets ``r``, find the distribution ``p`` whose marginals ``mu_r``
minimise the (negative Gaussian log-likelihood) loss

    L(mu) = sum_r || mu_r - y_r / N ||^2 / (sigma_r / N)^2          (N: the estimated total)

over the marginal polytope. Its maximum-entropy solution is a graphical model
``p(x) proportional to exp(sum_r theta_r(x_r))`` with one log-potential per measured set.
Entropic mirror descent on the polytope updates the potentials with the gradient,
``theta_r <- theta_r - alpha dL/dmu_r``, and maps them back to marginals by belief
propagation (their Algorithm 1); the step ``alpha`` is found by backtracking (halved until
``L(mu') <= L(mu) - <grad, mu - mu'> / 2``, then allowed to grow by 10% a step). The step is
taken from an extrapolated point ``theta + k / (k + 3) (theta - theta_prev)`` (Nesterov's
momentum), reset to ``k = 0`` whenever the loss rises or the step is halved (adaptive
restart, O'Donoghue & Candes 2015).

Inference is exact on a junction tree: the graph joining the attributes of each measured set
is triangulated by greedy elimination (the variable whose neighbourhood has the fewest cells
first), its maximal cliques joined by a maximum-weight spanning tree on separator sizes
(a junction tree, Jensen 1996). Sum-product messages run leaves to root in log space and
back from the parents' normalised marginals (:meth:`JunctionTree.marginals`), vectorised
with numpy. A clique's measured sets share the work of reaching them (:class:`_Plan`: sum
out the variable most of them lack, then recurse), so the work of an iteration is a few
passes over the cliques' cells, ``cells()``, which :class:`JunctionTree` reports before
anything is measured so a model too large is refused first.

Marginals of sets no clique contains (AIM's candidates) come from the smallest subtree that
covers them: the top clique's marginal times its descendants' conditionals, summed by
``einsum``. Sampling draws clique by clique down the tree with controlled rounding (each
cell gets ``floor(n p)`` rows or one more, with probability the fractional part: systematic
sampling), so the synthetic table's marginals match the model's up to one row a cell.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from veil.errors import ConfigError
from veil.random import Generator

__all__ = ["JunctionTree", "Measurement", "GraphicalModel", "estimate", "marginal_counts",
           "model_cells"]

logger = logging.getLogger(__name__)

Attrs = tuple[int, ...]


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal: ``values`` (shape: the sizes of ``attrs``, sorted) with noise sigma."""

    attrs: Attrs
    values: np.ndarray
    sigma: float


def marginal_counts(codes: np.ndarray, sizes: Sequence[int], attrs: Attrs) -> np.ndarray:
    """The contingency table of the columns ``attrs`` of integer ``codes``."""
    shape = tuple(sizes[a] for a in attrs)
    if not attrs:
        return np.array(float(codes.shape[0]))
    flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), shape)
    return np.bincount(flat, minlength=math.prod(shape)).reshape(shape).astype(np.float64)


def _axes(sub: Attrs, full: Attrs) -> tuple[int, ...]:
    """Axes of ``full`` (sorted attributes) that are not in ``sub``."""
    return tuple(i for i, a in enumerate(full) if a not in sub)


def _expand(values: np.ndarray, sub: Attrs, full: Attrs) -> np.ndarray:
    """``values`` on ``sub`` reshaped to broadcast against a factor on ``full`` (both sorted)."""
    return values.reshape([values.shape[sub.index(a)] if a in sub else 1 for a in full])


def _logsumexp(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if not axes:
        return x
    m = x.max(axis=axes, keepdims=True)
    with np.errstate(divide="ignore"):
        out = np.log(np.exp(x - m).sum(axis=axes, keepdims=True)) + m
    return out.squeeze(axis=axes)


class JunctionTree:
    """A junction tree over attributes with domain ``sizes`` whose cliques cover ``sets``.

    ``cliques`` (sorted attribute tuples), ``parent`` (-1 at the root), ``order`` (root
    first: every clique after its parent) and ``separator`` (with the parent).
    """

    def __init__(self, sizes: Sequence[int], sets: Sequence[Attrs]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        self.cliques = _maximal_cliques(self.sizes, sets)
        k = len(self.cliques)
        # maximum-weight spanning tree (Kruskal) on |C_i & C_j|; weight 0 joins components
        pairs = sorted(((len(set(a) & set(b)), i, j)
                        for (i, a), (j, b) in itertools.combinations(enumerate(self.cliques), 2)),
                       key=lambda t: (-t[0], t[1], t[2]))
        root_of = list(range(k))

        def find(i: int) -> int:
            while root_of[i] != i:
                root_of[i] = root_of[root_of[i]]
                i = root_of[i]
            return i

        adjacent: list[list[int]] = [[] for _ in range(k)]
        for _, i, j in pairs:
            ri, rj = find(i), find(j)
            if ri != rj:
                root_of[ri] = rj
                adjacent[i].append(j)
                adjacent[j].append(i)
        self.parent = [-1] * k
        self.order = [0]
        for i in self.order:  # breadth first from clique 0
            for j in adjacent[i]:
                if j != self.parent[i]:
                    self.parent[j] = i
                    self.order.append(j)
        self.children = [[j for j in self.order if self.parent[j] == i] for i in range(k)]
        self.separator = [tuple(a for a in self.cliques[i] if a in self.cliques[p]) if p >= 0
                          else () for i, p in enumerate(self.parent)]

    def cells(self) -> int:
        """The number of cells of all cliques (the size of one inference pass)."""
        return sum(math.prod(self.sizes[a] for a in c) for c in self.cliques)

    def home(self, attrs: Attrs) -> int | None:
        """A clique containing ``attrs`` (the smallest), or None."""
        found = [i for i, c in enumerate(self.cliques) if set(attrs) <= set(c)]
        return min(found, key=lambda i: len(self.cliques[i])) if found else None

    def marginals(self, potentials: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The marginal (probabilities) of every clique for clique log-potentials:
        sum-product belief propagation. Up (leaves to root) in log space,
        ``up_c = log sum_{C \\ S} exp(psi_c + sum of c's children's up)``; down (root to
        leaves) from the parent's normalised marginal ``mu_P``: ``log sum_{P \\ S} mu_P - up_c``
        (the parent's belief with c's own message divided out), which leaves every child's
        belief normalised. One ``exp`` per cell and direction."""
        k = len(self.cliques)
        up: list[np.ndarray] = [np.empty(0)] * k
        partial: list[np.ndarray] = [np.empty(0)] * k
        for i in reversed(self.order):
            b = potentials[i]
            for c in self.children[i]:
                b = b + _expand(up[c], self.separator[c], self.cliques[i])
            partial[i] = b
            if self.parent[i] >= 0:
                up[i] = _logsumexp(b, _axes(self.separator[i], self.cliques[i]))
        probs: list[np.ndarray] = [np.empty(0)] * k
        for i in self.order:
            p = self.parent[i]
            if p < 0:
                b = partial[i] - _logsumexp(partial[i], tuple(range(partial[i].ndim)))
            else:
                sep, parent = self.separator[i], self.cliques[p]
                with np.errstate(divide="ignore"):
                    down = np.log(probs[p].sum(axis=_axes(sep, parent))) - up[i]
                b = partial[i] + _expand(down, sep, self.cliques[i])
            probs[i] = np.exp(b)
        return probs


def model_cells(sizes: Sequence[int], sets: Sequence[Attrs]) -> int:
    """The cells of the junction tree of ``sets`` (its cliques only: no tree is built)."""
    return sum(math.prod(sizes[a] for a in c) for c in _maximal_cliques(tuple(sizes), sets))


def _maximal_cliques(sizes: tuple[int, ...], sets: Sequence[Attrs]) -> list[Attrs]:
    """The maximal cliques of a triangulation of the graph joining each set's attributes
    (every attribute is in one), by greedy elimination of the cheapest variable."""
    nbrs: dict[int, set[int]] = {a: set() for a in range(len(sizes))}
    for s in sets:
        for a in s:
            nbrs[a] |= set(s) - {a}
    found: list[set[int]] = []
    while nbrs:
        v = min(nbrs, key=lambda a: (math.prod(sizes[b] for b in nbrs[a] | {a}), a))
        clique = nbrs[v] | {v}
        for a in nbrs[v]:
            nbrs[a] |= nbrs[v] - {a}
            nbrs[a].discard(v)
        del nbrs[v]
        if not any(clique <= f for f in found):
            found.append(clique)
    found = [c for c in found if not any(c < f for f in found)]
    return [tuple(sorted(c)) for c in found]


class GraphicalModel:
    """A fitted model: the junction tree, its clique marginals (probabilities) and the
    estimated number of records ``total``."""

    def __init__(self, tree: JunctionTree, probs: list[np.ndarray], total: float) -> None:
        self.tree = tree
        self.probs = probs
        self.total = float(total)
        self._conditionals: dict[int, np.ndarray] = {}

    def marginal(self, attrs: Attrs) -> np.ndarray:
        """The model's probability table on ``attrs`` (sorted attribute indices)."""
        tree = self.tree
        home = tree.home(attrs)
        if home is not None:
            return self.probs[home].sum(axis=_axes(attrs, tree.cliques[home]))
        # the smallest subtree covering attrs: prune, repeatedly, leaves that are not needed
        need = {next(i for i, c in enumerate(tree.cliques) if a in c) for a in attrs}
        keep = set(range(len(tree.cliques)))
        changed = True
        while changed:
            changed = False
            for i in list(keep):
                degree = sum(1 for j in keep if tree.parent[j] == i) + (tree.parent[i] in keep)
                if i not in need and degree <= 1:
                    keep.discard(i)
                    changed = True
        operands: list = []
        for i in keep:
            p = self._conditional(i) if tree.parent[i] in keep else self.probs[i]
            operands += [p, list(tree.cliques[i])]
        return np.einsum(*operands, list(attrs), optimize="greedy")

    def _conditional(self, i: int) -> np.ndarray:
        """Clique ``i``'s marginal divided by its separator's (0 where that is 0); computed
        once (AIM asks for many candidates' marginals of one model)."""
        if i not in self._conditionals:
            tree, p = self.tree, self.probs[i]
            sep = _expand(p.sum(axis=_axes(tree.separator[i], tree.cliques[i])),
                          tree.separator[i], tree.cliques[i])
            with np.errstate(invalid="ignore", divide="ignore"):
                self._conditionals[i] = np.where(sep > 0, p / np.where(sep > 0, sep, 1.0), 0.0)
        return self._conditionals[i]

    def sample(self, n: int, rng: Generator) -> np.ndarray:
        """``n`` records ``(n, d)`` drawn clique by clique with controlled rounding."""
        tree, sizes = self.tree, self.tree.sizes
        out = np.zeros((n, len(sizes)), dtype=np.int64)
        for i in tree.order:
            clique, sep = tree.cliques[i], tree.separator[i]
            rest = tuple(a for a in clique if a not in sep)
            p = self.probs[i].transpose([clique.index(a) for a in sep + rest])
            n_sep = math.prod(sizes[a] for a in sep)
            table = p.reshape(n_sep, -1)
            if sep:
                group = np.ravel_multi_index(tuple(out[:, a] for a in sep),
                                             tuple(sizes[a] for a in sep))
            else:
                group = np.zeros(n, dtype=np.int64)
            counts = np.bincount(group, minlength=n_sep)
            row_sums = table.sum(axis=1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                cond = np.where(row_sums > 0, table / np.where(row_sums > 0, row_sums, 1.0),
                                1.0 / table.shape[1])
            alloc = _round_rows(counts[:, None] * cond, counts, rng)
            values = np.repeat(np.tile(np.arange(table.shape[1]), n_sep), alloc.ravel())
            # rows of a separator value, in random order, take its allocated values
            rows = np.lexsort((rng.random(n), group))
            unravelled = np.unravel_index(values, tuple(sizes[a] for a in rest))
            for a, v in zip(rest, unravelled):
                out[rows, a] = v
        return out


def _round_rows(expected: np.ndarray, totals: np.ndarray, rng: Generator) -> np.ndarray:
    """Integer rows summing to ``totals`` with cell ``floor(e)`` or ``floor(e) + 1``, the
    extra row with probability the fractional part (systematic sampling, per row)."""
    base = np.floor(expected)
    frac = expected - base
    extra = totals - base.sum(axis=1)
    s = frac.sum(axis=1, keepdims=True)
    frac = np.where(s > 0, frac * (extra[:, None] / np.where(s > 0, s, 1.0)), 0.0)
    cum = np.cumsum(frac, axis=1)
    u = rng.random(expected.shape[0])[:, None]
    hits = np.floor(cum + u) - np.floor(np.concatenate([np.zeros_like(u), cum[:, :-1]], 1) + u)
    out = (base + np.clip(hits, 0, None)).astype(np.int64)
    # round-off can leave a row one short or long: settle it on its largest cell
    diff = totals - out.sum(axis=1)
    top = np.argmax(expected, axis=1)
    out[np.arange(out.shape[0]), top] += diff
    return out


class _Plan:
    """How a clique's measured sets are reached from its table: sum out, one at a time, the
    variable that the most of them lack; the sets lacking it come from that smaller table
    (recursively), the others from this one. :meth:`project` takes every set's marginal from
    a clique table and :meth:`gather` adds the sets' log-potentials into a clique table
    (its adjoint), each in about one pass over the clique rather than one per set."""

    def __init__(self, attrs: Attrs, sets: list[Attrs], children: list[tuple[int, _Plan]]):
        self.attrs, self.sets, self.children = attrs, sets, children

    @classmethod
    def of(cls, attrs: Attrs, sets: Sequence[Attrs]) -> _Plan:
        rest = [s for s in sets if s != attrs]
        children = []
        while rest:
            v = max(attrs, key=lambda a: (sum(a not in s for s in rest), -a))
            children.append((attrs.index(v), cls.of(tuple(a for a in attrs if a != v),
                                                    [s for s in rest if v not in s])))
            rest = [s for s in rest if v in s]
        return cls(attrs, [s for s in sets if s == attrs], children)

    def project(self, table: np.ndarray, out: dict[Attrs, np.ndarray]) -> None:
        for s in self.sets:
            out[s] = table
        for axis, child in self.children:
            child.project(table.sum(axis=axis), out)

    def gather(self, theta: dict[Attrs, np.ndarray], shape: tuple[int, ...] | None = None
               ) -> np.ndarray:
        """The sum of the sets' potentials, broadcast to this table (``shape``: at the
        clique, the full table)."""
        total: np.ndarray | float = 0.0
        for s in self.sets:
            total = total + theta[s]
        for axis, child in self.children:
            total = total + np.expand_dims(child.gather(theta), axis)
        if shape is None:
            return np.asarray(total)
        return np.broadcast_to(total, shape).copy()


def estimated_total(measurements: Sequence[Measurement]) -> float:
    """The number of records: each measurement's sum, weighted by its inverse variance
    (``sigma^2`` times its cells); at least 1."""
    w = np.array([1.0 / (m.sigma ** 2 * m.values.size) for m in measurements])
    sums = np.array([m.values.sum() for m in measurements])
    return max(1.0, float((w * sums).sum() / w.sum()))


def estimate(sizes: Sequence[int], measurements: Sequence[Measurement], *, iters: int,
             total: float | None = None, warm: dict[Attrs, np.ndarray] | None = None,
             max_cells: int | None = None) -> tuple[GraphicalModel, dict[Attrs, np.ndarray]]:
    """Mirror descent (module docstring) for ``iters`` belief-propagation passes; returns
    the model and its potentials (``warm``: potentials to start from, for sets measured
    before)."""
    if not measurements:
        raise ConfigError("estimate needs at least one measurement")
    n_total = estimated_total(measurements) if total is None else float(total)
    sets = sorted({m.attrs for m in measurements})
    tree = JunctionTree(sizes, sets)
    if max_cells is not None and tree.cells() > max_cells:
        raise ConfigError(f"the model would hold {tree.cells()} cells, above "
                          f"max_cells={max_cells}")
    theta = {s: np.zeros(tuple(sizes[a] for a in s)) if warm is None or s not in warm
             else warm[s] for s in sets}
    target = {s: np.zeros(theta[s].shape) for s in sets}
    weight = dict.fromkeys(sets, 0.0)
    for m in measurements:  # several measurements of a set pool by inverse variance
        w = (n_total / m.sigma) ** 2
        target[m.attrs] += w * m.values / n_total
        weight[m.attrs] += w
    for s in sets:
        target[s] /= weight[s]
    home = {s: tree.home(s) for s in sets}
    plans = [_Plan.of(c, [s for s in sets if home[s] == i]) for i, c in enumerate(tree.cliques)]

    def infer(th: dict[Attrs, np.ndarray]) -> tuple[list[np.ndarray], dict, float, dict]:
        pots = [plan.gather(th, tuple(sizes[a] for a in plan.attrs)) for plan in plans]
        probs = tree.marginals(pots)
        mu: dict[Attrs, np.ndarray] = {}
        for plan, p in zip(plans, probs):
            plan.project(p, mu)
        loss = sum(weight[s] * float(((mu[s] - target[s]) ** 2).sum()) for s in sets)
        grad = {s: 2.0 * weight[s] * (mu[s] - target[s]) for s in sets}
        return probs, mu, loss, grad

    probs, mu, loss, grad = infer(theta)
    previous = theta
    alpha = 1.0 / (2.0 * sum(weight.values()))
    k = 0
    for _ in range(iters):
        momentum = k / (k + 3.0)
        y = {s: theta[s] + momentum * (theta[s] - previous[s]) for s in sets} if k else theta
        _, y_mu, y_loss, y_grad = infer(y) if k else (probs, mu, loss, grad)
        trial = {s: y[s] - alpha * y_grad[s] for s in sets}
        t_probs, t_mu, t_loss, t_grad = infer(trial)
        decrease = sum(float((y_grad[s] * (y_mu[s] - t_mu[s])).sum()) for s in sets)
        if y_loss - t_loss >= 0.5 * decrease:
            k = k + 1 if t_loss <= loss else 0   # adaptive restart (O'Donoghue & Candes 2015)
            previous = theta
            theta, probs, mu, loss, grad = trial, t_probs, t_mu, t_loss, t_grad
            alpha *= 1.1
        else:
            alpha *= 0.5
            k = 0
    logger.debug("estimate: %d sets, %d cells, loss %.4g, step %.3g", len(sets),
                 tree.cells(), loss, alpha)
    return GraphicalModel(tree, probs, n_total), theta
