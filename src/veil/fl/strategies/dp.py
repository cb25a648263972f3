"""DP-FedAvg: user-level differential privacy for any strategy, with fixed or adaptive
clipping and Gaussian noise at the server, at each client, or shared among the clients.

McMahan, Ramage, Talwar & Zhang, "Learning differentially private recurrent language
models" (ICLR 2018); Andrew, Thakkar, McMahan & Ramaswamy, "Differentially private learning
with adaptive clipping" (NeurIPS 2021). As in Flower, :class:`DPFedAvg` wraps any other
strategy (FedAvg, FedProx, ...): the inner strategy trains, the wrapper privatizes.

Round t, with N clients, sampling rate q and clip norm C_t:

1. each client joins the round independently with probability q (Poisson sampling, which
   the accounting assumes);
2. client k computes the inner strategy's update ``delta_k`` and clips it,
   ``delta_k * min(1, C_t / ||delta_k||_2)`` (:func:`veil.dp.sensitivity.clip_l2`; its
   weight becomes 1: the sum of clipped updates has L2 sensitivity C_t when one client's
   data is added or removed);
3. the server forms the fixed-denominator average (McMahan et al. 2018)

       w_{t+1} = w_t + eta_s (sum_k clip(delta_k) + N(0, (z_Delta C_t)^2 I)) / (q N);

   ``noise="central"``: the server draws the Gaussian (a trusted aggregator); central and
   local Gaussian noise is released on a fine grid by veil's exact sampler
   (floating-point safe, :func:`veil.dp.samplers.rounded_gaussian`);
   ``noise="local"``: each client clips to its *own* configured C and adds N(0, (z C)^2 I)
   to its update before sending it, with z from its own configuration (a server message
   announcing another clip norm or noise level is refused): this protects against the
   server too, and is much noisier in aggregate;
   ``noise="distributed"``: each client adds a share of the noise to its quantized update
   before secure aggregation masks it, so the server only sees the noisy sum; this needs
   :class:`~veil.fl.strategies.SecAgg`, which adds discrete Gaussian shares in the ring
   (Kairouz, Liu & Steinke, ICML 2021) and accounts them.

Adaptive clipping (Andrew et al. 2021, Algorithm 1): each client also reports
``b_k - 1/2``, ``b_k = 1[||delta_k|| <= C_t]``; the server estimates the unclipped fraction
``b = (sum_k (b_k - 1/2) + N(0, sigma_b^2)) / (q N) + 1/2`` and moves the clip norm towards
the ``target_quantile`` gamma geometrically, ``C_{t+1} = C_t exp(-eta_C (b - gamma))``.
Releasing both sums is one Gaussian mechanism with noise multiplier z when
``z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)`` (their Theorem 1: the count query has
sensitivity 1/2, so its multiplier is 2 sigma_b); sigma_b defaults to qN/20.

Privacy, and the neighbour relation each certificate names (``DPFedAvg.privacy.relation``):

* central and distributed noise: **add/remove of one client's data** (user level, McMahan
  et al. 2018): the clipped updates' sum moves by at most C, so each round is
  ``PoissonSampled(q, Gaussian(z))`` (for q = 1 just ``Gaussian(z)``; SecAgg prices the
  distributed noise); amplification by sampling holds against everyone who does not see
  which clients were sampled, i.e. against the users of the released model, with the
  server trusted.
* local noise: **replace-one, any two inputs of one client** (the convention of local DP,
  Kasiviswanathan, Lee, Nissim, Raskhodnikova & Smith 2011; Dwork & Roth 2014, Sec. 12.1):
  the guarantee holds against the server, which sees each client's noisy update on its
  own. Two clipped updates u, u' with ||u||, ||u'|| <= C differ by up to 2C in L2 norm, so
  N(0, (z C)^2) on one update is a Gaussian mechanism of multiplier z C / (2 C) = z / 2
  (Dwork & Roth 2014, Thm. A.1; Balle & Wang 2018 for the exact curve the accountant
  uses). The server does the sampling: it knows (and may choose) which rounds a client
  takes part in, so there is no amplification; a client sampled in K of the T rounds
  releases K answers, K <= T, and the server may make K = T. Each round is therefore
  charged as an unsampled ``Gaussian(z / 2)``, and :meth:`DPFedAvg.from_budget`
  calibrates local noise for that event (z twice the add/remove calibration). (Charging
  ``Gaussian(z)``, add/remove of a whole update, certified 3.998 for a target of 4 where
  the replace-one epsilon against the server is 9.08.)

The ledger's accountant certifies the composition over rounds; ``z`` comes from
:func:`veil.dp.accounting.calibrate_noise` for a target (epsilon, delta) over the planned
rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np

from veil._validation import check_choice, check_positive, check_probability
from veil.dp.accounting import calibrate_noise, subsampled_gaussian_event
from veil.dp.privacy_budget import PrivacyBudget, check_budget
from veil.dp.samplers import rounded_gaussian
from veil.dp.sensitivity import clip_l2
from veil.errors import ConfigError, ProtocolError
from veil.fl.protocol import Aggregate, ClientUpdate
from veil.fl.strategies.base import (
    NOISE_AT,
    Privacy,
    StrategyWrapper,
    UpdateStrategy,
    config_value,
)
from veil.fl.trainer import LocalTrainer
from veil.random import Generator, noise_rng

__all__ = ["DPFedAvg", "DistributedNoise"]

_UNCLIPPED = "unclipped"
#: noise -> the neighbour relation its certificate names (module docstring)
RELATIONS = {"central": "add/remove one client's data",
             "local": "replace-one: any two inputs of one client (against the server)",
             "distributed": "add/remove one client's data"}


def _sample_rate(inner: UpdateStrategy, sample_rate: float | None) -> float:
    """q: ``sample_rate``, by default the inner strategy's ``fraction`` (else 1)."""
    q = getattr(inner, "fraction", 1.0) if sample_rate is None else sample_rate
    return check_probability(q, "sample_rate", low_open=True)


def _charged(noise: str, sample_rate: float) -> tuple[float, float]:
    """(sensitivity in units of C, sampling rate) that a round is charged at: local noise
    is replace-one (2C) and claims no amplification by sampling (q = 1), distributed
    noise is priced by SecAgg at q = 1 (module docstring)."""
    if noise == "local":
        return 2.0, 1.0
    return 1.0, (sample_rate if noise == "central" else 1.0)


@dataclass(frozen=True)
class DistributedNoise:
    """What secure aggregation must add, in total, to the sum of a round's updates:
    Gaussian noise of multiplier ``multiplier`` relative to the L2 bound ``clip_norm`` on
    the updates, and noise of standard deviation ``extras_std[name]`` on each summed scalar
    (whose per-client range has width 1)."""

    multiplier: float
    clip_norm: float
    extras_std: Mapping[str, float]


def _gaussian(center: Any, std: float, rng: Generator) -> Any:
    """``center + N(0, std^2)`` released on the grid 2^(floor(log2 std) - 20) with veil's
    exact sampler (:func:`veil.dp.samplers.rounded_gaussian`): the Gaussian mechanism
    followed by rounding, with no floating-point artefact that could leak the center
    (Mironov 2012)."""
    grid = 2.0 ** (math.floor(math.log2(std)) - 20)
    return rounded_gaussian(center, std, grid, rng) * grid


class DPFedAvg(StrategyWrapper):
    """Differentially private federated averaging around ``inner`` (see module docstring).

    Parameters
    ----------
    inner: the strategy that trains (FedAvg, FedProx, ...); its weights are replaced by 1.
    noise_multiplier: z, the noise standard deviation over the clip norm (whole round).
    clip_norm: C (the initial C_0 when adaptive).
    noise: "central", "local" or "distributed" (the latter inside SecAgg).
    sample_rate: q (default: the inner strategy's ``fraction``, else 1).
    adaptive, target_quantile, clip_learning_rate, clipped_count_stddev: adaptive clipping
        (gamma, eta_C and sigma_b; sigma_b None: qN/20).
    server_learning_rate: eta_s.
    budget: the :class:`~veil.dp.PrivacyBudget` z was calibrated for (set by
        :meth:`from_budget`; None when z is given directly).
    """

    def __init__(self, inner: UpdateStrategy, *, noise_multiplier: float, clip_norm: float = 1.0,
                 noise: str = "central", sample_rate: float | None = None,
                 adaptive: bool = False, target_quantile: float = 0.5,
                 clip_learning_rate: float = 0.2, clipped_count_stddev: float | None = None,
                 server_learning_rate: float = 1.0, budget: PrivacyBudget | None = None) -> None:
        super().__init__(inner)
        if inner.extras_bounds():
            raise ConfigError(f"inner={type(inner).__name__} reports extra scalars "
                              f"{sorted(inner.extras_bounds())}, whose sensitivity DPFedAvg "
                              "cannot bound")
        self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.noise = check_choice(noise, "noise", NOISE_AT)
        self.sample_rate = _sample_rate(inner, sample_rate)
        self.budget = None if budget is None else check_budget(budget)
        self.adaptive = bool(adaptive)
        self.target_quantile = check_probability(target_quantile, "target_quantile")
        self.clip_learning_rate = check_positive(clip_learning_rate, "clip_learning_rate")
        self.clipped_count_stddev = None if clipped_count_stddev is None else \
            check_positive(clipped_count_stddev, "clipped_count_stddev")
        self.server_learning_rate = check_positive(server_learning_rate,
                                                   "server_learning_rate")
        if self.adaptive and self.noise == "local":
            raise ConfigError("adaptive=True is not allowed with noise='local': the clipped "
                              "count would need its own local noise; use 'central' or "
                              "'distributed'")
        self.clip_norm_ = self.clip_norm
        self._expected = 0.0

    @classmethod
    def from_budget(cls, inner: UpdateStrategy, budget: PrivacyBudget, *, rounds: int,
                    **kwargs: Any) -> DPFedAvg:
        """A DPFedAvg whose z makes ``rounds`` rounds ``budget``-DP (client level), calibrated
        with :func:`veil.dp.accounting.calibrate_noise` for the event a round is charged
        (:func:`_charged`: the sampling rate for central noise; rate 1 for local and
        distributed noise, local noise for replace-one, sensitivity 2C) with
        ``budget.accountant`` ("rdp" for distributed noise, which SecAgg charges as zCDP:
        every policy takes that cost from its Renyi curve, the Gaussian's, exactly). The
        strategy carries ``budget`` (:attr:`privacy`): the federation's ledger must cap it."""
        budget = check_budget(budget)
        noise = check_choice(kwargs.get("noise", "central"), "noise", NOISE_AT)
        sensitivity, q = _charged(noise, _sample_rate(inner, kwargs.get("sample_rate")))
        accountant = "rdp" if noise == "distributed" else budget.accountant
        z = calibrate_noise(budget.epsilon, budget.delta, sample_rate=q, steps=rounds,
                            accountant=accountant)
        return cls(inner, noise_multiplier=sensitivity * z, budget=budget, **kwargs)

    # -- server side ---------------------------------------------------------------------
    def sample(self, server_round: int, clients: Sequence[int], rng: Generator) -> list[int]:
        pool = sorted(clients)
        self._expected = self.sample_rate * len(pool)
        self._delta_multiplier()  # checks z against sigma_b before anything is charged
        if self.sample_rate == 1.0:
            return pool
        keep = rng.random(len(pool)) < self.sample_rate
        return [c for c, k in zip(pool, keep) if k]

    def _count_stddev(self) -> float:
        return self.clipped_count_stddev or self._expected / 20.0

    def _delta_multiplier(self) -> float:
        """z_Delta: the update's share of the noise (all of z without adaptive clipping)."""
        z = self.noise_multiplier
        if not self.adaptive:
            return z
        two_sb = 2.0 * self._count_stddev()
        if not two_sb > z:
            raise ConfigError(
                f"adaptive clipping with noise_multiplier={z:g} needs clipped_count_stddev > "
                f"{z / 2:g} (Andrew et al. 2021: z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2); got "
                f"sigma_b={two_sb / 2:g}: raise clipped_count_stddev or sample more clients")
        return (z ** -2 - two_sb ** -2) ** -0.5

    def client_config(self, server_round: int) -> dict[str, Any]:
        config = {**self.inner.client_config(server_round), "clip_norm": self.clip_norm_}
        if self.noise == "local":
            config["noise_std"] = self.noise_multiplier * self.clip_norm_
        return config

    def round_event(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
                    population: int) -> dp_accounting.DpEvent:
        if self.noise == "distributed":
            raise ConfigError("noise='distributed' is accounted by secure aggregation: wrap "
                              "this strategy in SecAgg(...)")
        sensitivity, q = _charged(self.noise, self.sample_rate)  # see the module docstring
        return subsampled_gaussian_event(self.noise_multiplier / sensitivity, q)

    @property
    def privacy(self) -> Privacy:
        """Noise at the server, at each client or shared among them; the neighbour relation
        of its certificate (module docstring); a fixed event per round unless distributed
        (SecAgg prices that one from the round's cohort)."""
        return Privacy(noise=self.noise, fixed_event=self.noise != "distributed",
                       relation=RELATIONS[self.noise], budget=self.budget)

    def distributed_noise(self, server_round: int) -> DistributedNoise | None:
        """For SecAgg: the total noise the clients must add (None unless distributed)."""
        if self.noise != "distributed":
            return None
        extras = {_UNCLIPPED: self._count_stddev()} if self.adaptive else {}
        return DistributedNoise(self._delta_multiplier(), self.clip_norm_, extras)

    def extras_bounds(self) -> dict[str, tuple[float, float]]:
        return {_UNCLIPPED: (-0.5, 0.5)} if self.adaptive else {}

    def weight_bound(self) -> float:
        return 1.0

    def update_norm_bound(self, server_round: int) -> float | None:
        # local noise is added on the client: the noisy update it sends has no bound
        return None if self.noise == "local" else self.clip_norm_

    def aggregate(self, server_round: int, params: np.ndarray, total: Aggregate,
                  rng: Generator) -> np.ndarray:
        if not self._expected > 0:
            raise ProtocolError(f"round {server_round}: no clients were expected (sample first)")
        clip = self.clip_norm_
        noisy = total.total
        if self.noise == "central":
            # the quantization of secure aggregation may add l2_slack to each update's norm
            std = self._delta_multiplier() * (clip + total.l2_slack)
            noisy = _gaussian(noisy, std, noise_rng(rng))
        new = params + self.server_learning_rate * noisy / self._expected
        if self.adaptive:
            count = total.extras[_UNCLIPPED]
            if self.noise == "central":
                count = float(_gaussian(count, self._count_stddev(), noise_rng(rng)))
            unclipped = count / self._expected + 0.5
            self.clip_norm_ = clip * math.exp(
                -self.clip_learning_rate * (unclipped - self.target_quantile))
        return new

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "clip_norm": self.clip_norm_}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.clip_norm_ = float(state.get("clip_norm", self.clip_norm))

    # -- client side ---------------------------------------------------------------------
    def client_update(self, trainer: LocalTrainer, params: np.ndarray,
                      config: Mapping[str, Any], rng: Generator) -> ClientUpdate:
        update = self.inner.client_update(trainer, params, config, rng)
        clip = float(config_value(config, "clip_norm", (int, float), low=1e-300))
        if self.noise == "local":  # the client's own plan, never the server's numbers
            std = float(config_value(config, "noise_std", (int, float), low=0.0))
            mine = self.noise_multiplier * self.clip_norm
            if clip != self.clip_norm or not math.isclose(std, mine, rel_tol=1e-12):
                raise ProtocolError(
                    f"the server asks for clip_norm={clip:g} and noise_std={std:g}; this "
                    f"client's own plan is clip_norm={self.clip_norm:g} and noise_std="
                    f"{mine:g} (noise_multiplier={self.noise_multiplier:g}): refused")
        delta, clipped = clip_l2(update.delta, clip)
        if self.noise == "local":
            delta = _gaussian(delta, std, noise_rng(rng))
        extras = {_UNCLIPPED: 0.5 - clipped} if self.adaptive else {}
        return ClientUpdate(delta, 1.0, extras)
