"""The private optimizer step: clip, sum, add Gaussian noise, average, update.

For a logical batch ``S`` (Poisson sample, possibly cut into chunks) the update direction of
parameter block ``p`` is::

    grad_p = ( sum_{i in S} c_i G_i^p  +  sigma * C * z_p ) / b,    z ~ N(0, I),

with ``c_i = min(1, C / ||G_i||)`` (the norm over all parameters), ``b`` the expected batch
size ``qN`` (Poisson; dividing by the realised ``|S|`` would leak it) or the fixed batch size,
and then the wrapped optimizer (SGD, Adam, ...) takes its step with these gradients, which are
post-processing of the noisy sum (Abadi et al. 2016, Algorithm 1).

The noise ``z`` is one draw of ``D = sum_p numel(p)`` standard normals from ``veil.random``
(the AES-CTR CSPRNG by default; a seeded generator in tests), in float64; ``sigma C z / b``
is computed in float64 and rounded once to the parameters' dtype (one dtype and device for
all), laid over them in their order.
The draws of several steps are made in one call (:class:`~veil.learn.dpsgd.draws.Rows`); each
step's ``z`` is a fresh row, used once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, defaultdict
from typing import Any

import numpy as np

from veil.dp.ledger import Ledger
from veil.errors import ConfigError
from veil.learn.dpsgd._torch import torch
from veil.learn.dpsgd.draws import Rows
from veil.learn.dpsgd.engine import PerExampleGradients
from veil.learn.dpsgd.loader import StepCounter
from veil.random import Generator

log = logging.getLogger(__name__)

__all__ = ["PrivateOptimizer"]


class PrivateOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer so that each step is a DP-SGD step.

    ``param_groups``, ``state`` and ``state_dict`` are those of the wrapped optimizer (so
    learning-rate schedulers work); ``plan`` is the schedule and its certified cost, ``ledger``
    the ledger it was charged to. The noisy gradients are consumed by the update: after a
    step the parameters' ``.grad`` are None. Counters (``steps``, ``examples``, ``clipped``,
    ``skipped``) are diagnostics computed without noise: they are not private.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, engine: PerExampleGradients,
                 plan: Any, counter: StepCounter, rng: Generator, *,
                 ledger: Ledger | None = None, nonfinite: str = "skip") -> None:
        # torch.optim.Optimizer.__init__ is not called: the state lives in `optimizer`.
        self.original_optimizer = optimizer
        self.engine = engine
        self.plan = plan
        self.ledger = ledger
        self.counter = counter
        self.rng = rng
        self.nonfinite = nonfinite
        self.steps = 0
        self.examples = 0
        self.clipped = 0
        self.skipped = 0
        self._params = engine.params
        self._numel = sum(p.numel() for p in self._params)
        first = self._params[0]
        self._grad = first.new_zeros(self._numel)  # the flat noisy gradient, reused
        self._noise = Rows(rng.standard_normal, self._numel, plan.steps)  # float64
        self._views = [g.view(p.shape) for p, g in
                       zip(self._params, self._grad.split([p.numel() for p in self._params]))]
        self._batch: int | None = None
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_post_hooks: OrderedDict = OrderedDict()

    # -- the wrapped optimizer's state -------------------------------------------------
    @property
    def param_groups(self) -> list[dict]:  # type: ignore[override]
        return self.original_optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict]) -> None:
        self.original_optimizer.param_groups = groups

    @property
    def state(self) -> defaultdict:  # type: ignore[override]
        return self.original_optimizer.state

    @state.setter
    def state(self, state: defaultdict) -> None:
        self.original_optimizer.state = state

    @property
    def defaults(self) -> dict:  # type: ignore[override]
        return self.original_optimizer.defaults

    @defaults.setter
    def defaults(self, defaults: dict) -> None:
        self.original_optimizer.defaults = defaults

    def state_dict(self) -> dict:
        return self.original_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.original_optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict) -> None:
        raise ConfigError("add_param_group is not allowed on a private optimizer: the "
                          "parameters are fixed by make_private")

    def __repr__(self) -> str:
        return (f"PrivateOptimizer({type(self.original_optimizer).__name__}, "
                f"noise_multiplier={self.plan.noise_multiplier:.4g}, "
                f"max_grad_norm={self.plan.max_grad_norm:g})"
                + (" [simulation: seeded noise, epsilon not certified]"
                   if self.plan.simulated else ""))

    # -- the step ------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear ``.grad`` and the per-example records of earlier backward passes."""
        self.original_optimizer.zero_grad(set_to_none=set_to_none)
        self.engine.discard_gradients()

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        """Clip and sum this chunk's gradients, on top of the noise drawn for its logical
        batch at the first chunk; after the last chunk, update the parameters."""
        if closure is not None:
            raise ConfigError("closure is not allowed: DP-SGD takes one step per sampled batch "
                              "(optimizers that re-evaluate the loss, such as LBFGS, are not "
                              "covered by its privacy analysis)")
        batch, size, last = self.counter.consume()
        for i, p in enumerate(self._params):
            if p.grad is not None and bool(p.grad.any()):
                raise ConfigError(
                    f"parameter #{i} (shape {tuple(p.shape)}) received an unclipped gradient "
                    "from autograd: it is used outside the forward of the layer that owns it "
                    "(e.g. a weight passed to a torch.nn.functional call); route it through "
                    "its module")
        divisor = self.plan.batch_size
        if self._batch != batch:  # a new logical batch (a partial one left is dropped)
            # grad = (sigma C z + sum) / b: the buffer starts as the noise, the sums add to it
            # sigma C z / b in float64, rounded once to the parameters' dtype
            factor = self.plan.noise_multiplier * self.plan.max_grad_norm / divisor
            self._grad.copy_(torch.from_numpy(np.multiply(self._noise.next(), factor)))
            self._batch = batch
        result = self.engine.clip(self.plan.max_grad_norm, nonfinite=self.nonfinite,
                                  expected_batch_size=size, scale=1.0 / divisor,
                                  out=self._views)
        self.examples += result.n_examples
        self.clipped += result.n_clipped
        self.skipped += result.n_skipped
        if not last:
            return None
        self._batch = None
        for p, view in zip(self._params, self._views):
            p.grad = view
        self.original_optimizer.step()
        for p in self._params:
            p.grad = None
        self.steps += 1
        return None
