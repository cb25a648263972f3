"""What every synthesizer shares: the price of a fit, the one charge, and the measurements.

Privacy (all methods): neighbouring tables differ by **adding or removing one row**.
A fit at ``(epsilon, delta)`` runs under zero-concentrated DP with the largest ``rho`` whose
rho-zCDP certifies (epsilon, delta)-DP (:func:`veil.dp.gaussian.zcdp_rho`: the conversion of
Canonne, Kamath & Steinke 2020, Prop. 12, the one the ledger's accountant applies). Its
building blocks, composed additively in rho (Bun & Steinke 2016, Lemma 2.3, adaptively):

* a marginal (contingency table) has L2 sensitivity 1 under add/remove: one row moves one
  cell by one. With discrete Gaussian noise of scale sigma (Canonne, Kamath & Steinke 2020,
  Thm. 14; drawn exactly, :func:`veil.dp.samplers.discrete_gaussian`) it is
  ``1 / (2 sigma^2)``-zCDP;
* the exponential mechanism at epsilon is ``epsilon^2 / 8``-zCDP (Cesar & Rogers 2021,
  bounded range), sampled exactly by Gumbel-max (:func:`veil.dp.samplers.noisy_argmax`).

Each method spends exactly rho (AIM's rounds stop when it is used up), so the whole fit is
priced ``ZCDpEvent(rho)`` before the first measurement and charged to the ledger once, at
the fit's delta; a ledger without room for it refuses before anything is measured. The
schema, the method's settings and the model-size limit are checked before that charge:
nothing about the model's structure beyond what the mechanisms select depends on the data.

Noise comes from :mod:`veil.random`'s CSPRNG; ``rng=<seed>`` is a labelled simulation
(logged; ``simulated_`` is True) whose epsilon is not certified.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
from dp_accounting import dp_event as de

from veil._validation import check_delta, check_epsilon, check_int
from veil.dp.gaussian import zcdp_rho
from veil.dp.ledger import Charge, Ledger, open_ledger
from veil.dp.samplers import discrete_gaussian, noisy_argmax
from veil.errors import BudgetExceededError, ConfigError
from veil.random import Generator, RngLike, check_rng
from veil.synth.model import GraphicalModel, Measurement, marginal_counts
from veil.synth.schema import Schema

__all__ = ["Synthesizer", "measure", "select", "DEFAULT_MAX_CELLS"]

logger = logging.getLogger(__name__)

#: the largest model (cells over all junction-tree cliques) a fit may build: 1e7 doubles
#: (80 MB), AIM's own default (McKenna et al. 2022, MAX-SIZE = 80 MB)
DEFAULT_MAX_CELLS = 10_000_000


def measure(codes: np.ndarray, sizes: tuple[int, ...], attrs: tuple[int, ...], sigma: float,
            rng: Generator) -> Measurement:
    """The marginal on ``attrs`` plus discrete Gaussian noise: ``1 / (2 sigma^2)``-zCDP."""
    counts = marginal_counts(codes, sizes, attrs)
    noise = discrete_gaussian(sigma, counts.shape, rng)
    return Measurement(attrs, counts + noise, sigma)


def select(scores: np.ndarray, epsilon: float, sensitivity: float, rng: Generator) -> int:
    """The exponential mechanism on ``scores``: ``epsilon^2 / 8``-zCDP."""
    return noisy_argmax(scores, coef=epsilon / (2.0 * sensitivity), noise="gumbel", rng=rng)


#: the most rows :meth:`sample` draws at once (a table in memory)
MAX_ROWS = 10**8

class Synthesizer:
    """Fit a model of a table under (epsilon, delta)-DP, then sample synthetic rows.

    ``fit(data, ledger=None)`` charges ``ledger`` (None: a one-off ledger of exactly
    (epsilon, delta)) the price :meth:`cost`, once; ``sample(n)`` draws ``n`` rows (None:
    the model's noisy estimate of the table's size) as a DataFrame with the schema's
    columns. Learned: ``model_`` (the graphical model), ``measurements_``, ``charge_``
    (the ledger row), ``simulated_``.
    """

    method = ""

    def __init__(self, schema: Schema, *, epsilon: float, delta: float,
                 iters: int = 1000, max_cells: int = DEFAULT_MAX_CELLS,
                 rng: RngLike = None) -> None:
        self.schema = schema
        self.epsilon = epsilon
        self.delta = delta
        self.iters = iters
        self.max_cells = max_cells
        self.rng = rng

    def cost(self) -> de.ZCDpEvent:
        """The whole fit's price, before anything runs: ``ZCDpEvent(rho)``."""
        epsilon = check_epsilon(self.epsilon)
        delta = check_delta(self.delta)
        if delta == 0.0:
            raise ConfigError("delta=0 is not allowed: the Gaussian measurements need delta "
                              "in (0, 1)")
        return de.ZCDpEvent(zcdp_rho(epsilon, delta))

    def _check(self) -> Schema:
        """Settings and model size, before anything is charged (ConfigError)."""
        if not isinstance(self.schema, Schema):
            raise ConfigError(f"schema={type(self.schema).__name__} is not allowed: a "
                              "veil.synth.Schema (Schema.from_dict, load_schema)")
        check_int(self.iters, "iters", low=1)
        check_int(self.max_cells, "max_cells", low=1)
        largest = self._largest_model(self.schema.sizes)
        if largest > self.max_cells:
            raise ConfigError(f"max_cells={self.max_cells} is not allowed for this schema: "
                              f"{self.method} may build a model of {largest} cells; raise "
                              "max_cells or declare coarser bins")
        return self.schema

    def _largest_model(self, sizes: tuple[int, ...]) -> int:
        """The most cells the method's first model needs (checked against max_cells)."""
        return sum(sizes)

    def fit(self, data: pd.DataFrame, *, ledger: Ledger | None = None) -> Synthesizer:
        event = self.cost()
        schema = self._check()
        codes = schema.encode(data)   # DataError before anything is charged
        book = open_ledger(ledger, check_epsilon(self.epsilon), check_delta(self.delta))
        if not book.fits(event, delta=self.delta):
            left, at = book.remaining()
            raise BudgetExceededError(
                f"{self.method} at epsilon={self.epsilon:g}, delta={self.delta:g} (rho="
                f"{event.rho:.4g}) does not fit the ledger ({left:.3g} of its epsilon remains "
                f"at delta={at:g}, and each fit's delta is reserved whole): not even the "
                "one-way marginals can be measured; nothing was measured or charged")
        gen = check_rng(self.rng)
        self.simulated_ = gen.seeded
        if self.simulated_:
            logger.warning("%s: rng=%r seeds the privacy noise: a labelled simulation whose "
                           "epsilon is not certified", self.method, self.rng)
        self.charge_: Charge = book.charge(event, delta=self.delta, label=f"synth.{self.method}")
        self.measurements_: list[Measurement] = []
        self.model_: GraphicalModel = self._fit(codes, schema.sizes, event.rho, gen)
        return self

    def _fit(self, codes: np.ndarray, sizes: tuple[int, ...], rho: float,
             rng: Generator) -> GraphicalModel:
        raise NotImplementedError

    def sample(self, n: int | None = None, *, rng: RngLike = None) -> pd.DataFrame:
        """``n`` synthetic rows (post-processing: no further cost)."""
        if not hasattr(self, "model_"):
            raise ConfigError(f"{type(self).__name__} is not fitted: call fit(data) first")
        count = (max(1, min(round(self.model_.total), MAX_ROWS)) if n is None
                 else check_int(n, "n", low=1, high=MAX_ROWS))
        gen = check_rng(rng if rng is not None else self.rng)
        return self.schema.decode(self.model_.sample(count, gen), gen)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r}, "
                f"columns={len(self.schema.columns) if isinstance(self.schema, Schema) else '?'})")


def sigma_for(rho: float, count: int) -> float:
    """The noise scale at which ``count`` unit-sensitivity marginals cost ``rho`` together."""
    return math.sqrt(count / (2.0 * rho))
