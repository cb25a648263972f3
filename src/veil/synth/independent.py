"""The baseline: every column's one-way marginal, noised, and nothing else.

Each of the ``d`` one-way marginals gets discrete Gaussian noise of scale
``sigma = sqrt(d / (2 rho))`` (``d`` measurements of ``1 / (2 sigma^2)``-zCDP each: rho in
all, :mod:`veil.synth.base`). The model is the product of the estimated one-way
distributions: columns are independent in the synthetic table.
"""

from __future__ import annotations

import numpy as np

from veil.random import Generator
from veil.synth.base import Synthesizer, measure, sigma_for
from veil.synth.model import GraphicalModel, estimate

__all__ = ["Independent"]


class Independent(Synthesizer):
    """Independent noisy one-way marginals (see the module docstring)."""

    method = "independent"

    def _fit(self, codes: np.ndarray, sizes: tuple[int, ...], rho: float,
             rng: Generator) -> GraphicalModel:
        sigma = sigma_for(rho, len(sizes))
        self.measurements_ = [measure(codes, sizes, (a,), sigma, rng) for a in range(len(sizes))]
        return estimate(sizes, self.measurements_, iters=self.iters)[0]
