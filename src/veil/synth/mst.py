"""MST (McKenna, Miklau & Sheldon 2021, "Winning the NIST contest: a scalable and general
approach to differentially private synthetic data", J. Priv. Confidentiality 11(3)).

rho is split in thirds (their Algorithm 1):

1. the ``d`` one-way marginals, each with noise ``sigma_1 = sqrt(3 d / (2 rho))``;
2. a spanning tree of the columns, grown like Kruskal's: ``d - 1`` times, among the pairs
   joining two components, the exponential mechanism at ``epsilon_s = sqrt(8 (rho / 3) /
   (d - 1))`` picks one with quality ``||M_ij(D) - M_ij(p1)||_1`` (sensitivity 1 under
   add/remove), ``p1`` the model of the one-way measurements: the pairs that independence
   explains worst;
3. the ``d - 1`` two-way marginals of the tree, each with noise
   ``sigma_2 = sqrt(3 (d - 1) / (2 rho))``.

The model (:mod:`veil.synth.model`) is fitted to all measurements; its cliques are the
tree's edges. (Their domain compression of rare values is not done: declared categories
stay as declared.)
"""

from __future__ import annotations

import itertools

import numpy as np

from veil.random import Generator
from veil.synth.base import Synthesizer, measure, select, sigma_for
from veil.synth.model import GraphicalModel, estimate, marginal_counts

__all__ = ["MST"]


class MST(Synthesizer):
    """Maximum-spanning-tree synthesizer (see the module docstring)."""

    method = "mst"

    def _largest_model(self, sizes: tuple[int, ...]) -> int:
        """The d - 1 largest pair tables: at least what any spanning tree holds."""
        pairs = sorted((a * b for a, b in itertools.combinations(sizes, 2)), reverse=True)
        return max(sum(sizes), sum(pairs[:len(sizes) - 1]))

    def _fit(self, codes: np.ndarray, sizes: tuple[int, ...], rho: float,
             rng: Generator) -> GraphicalModel:
        d = len(sizes)
        if d == 1:  # nothing to select: all of rho on the one marginal
            self.measurements_ = [measure(codes, sizes, (0,), sigma_for(rho, 1), rng)]
            return estimate(sizes, self.measurements_, iters=self.iters)[0]
        ones = [measure(codes, sizes, (a,), sigma_for(rho / 3, d), rng) for a in range(d)]
        first = estimate(sizes, ones, iters=self.iters)[0]
        scores = {}
        for pair in itertools.combinations(range(d), 2):
            truth = marginal_counts(codes, sizes, pair)
            scores[pair] = float(np.abs(truth - first.total * first.marginal(pair)).sum())
        epsilon = float(np.sqrt(8.0 * (rho / 3) / (d - 1)))
        component = list(range(d))
        tree = []
        for _ in range(d - 1):
            candidates = [p for p in scores if component[p[0]] != component[p[1]]]
            pick = candidates[select(np.array([scores[p] for p in candidates]), epsilon, 1.0,
                                     rng)]
            tree.append(pick)
            old, new = component[pick[0]], component[pick[1]]
            component = [new if c == old else c for c in component]
        sigma2 = sigma_for(rho / 3, d - 1)
        self.measurements_ = ones + [measure(codes, sizes, p, sigma2, rng) for p in tree]
        return estimate(sizes, self.measurements_, iters=self.iters)[0]
