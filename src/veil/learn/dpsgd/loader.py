"""Batches for DP-SGD: the sampling the privacy accounting assumes, in bounded memory.

Two samplers, each accounted as what it is:

* **Poisson** (default; Abadi et al. 2016): every step, each of the ``N`` examples joins the
  batch independently with probability ``q`` (a Bernoulli draw from ``veil.random``; the
  ``N`` trials of several steps are drawn in one call, each step's used once), so batch
  sizes vary around ``qN`` and may be 0. Accounted as ``PoissonSampledDpEvent(q, ...)``.
* **Fixed size**: every step, a uniformly random subset of exactly ``B`` distinct examples.
  Accounted by :func:`veil.dp.accounting.subsampled_gaussian_event` with
  ``sampling="without_replacement"`` (a coupling bound at twice the sensitivity), never as
  a Poisson batch of the same noise.

A logical batch larger than ``max_physical_batch_size`` is cut into physical chunks
("virtual steps"): the optimizer sums the clipped gradients of the chunks and takes its one
noisy step after the last chunk, so memory is bounded by the chunk size while the
privacy analysis sees the logical batch.

The loader and the optimizer share a :class:`StepCounter`: the optimizer accepts a step only
for a chunk this loader produced, and the loader refuses to sample beyond the number of
steps that was charged to the ledger (:class:`~veil.errors.BudgetExceededError`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.learn.dpsgd._torch import torch
from veil.learn.dpsgd.draws import Rows
from veil.random import Generator

__all__ = ["PrivateLoader", "StepCounter", "as_source"]


class StepCounter:
    """Steps sampled so far against the planned number, and the chunk awaiting its step."""

    def __init__(self, planned: int) -> None:
        self.planned = planned
        self.sampled = 0
        self.pending: tuple[int, int, bool] | None = None  # (batch number, size, last chunk)

    def begin_batch(self) -> int:
        if self.sampled >= self.planned:
            raise BudgetExceededError(
                f"all {self.planned} planned DP-SGD steps have been sampled (their privacy "
                "cost was charged to the ledger up front); call make_private again to train "
                "further")
        self.sampled += 1
        return self.sampled

    def announce(self, batch: int, size: int, last: bool) -> None:
        self.pending = (batch, size, last)

    def consume(self) -> tuple[int, int, bool]:
        pending, self.pending = self.pending, None
        if pending is None:
            raise ConfigError(
                "optimizer.step() was called without a new batch from the private loader: "
                "train on the batches of the loader make_private returned (one step per "
                "batch), since its sampling is what the privacy accounting assumes")
        return pending


class _Tensors:
    """In-memory tensors indexed along dimension 0."""

    def __init__(self, tensors: Sequence[Any], single: bool) -> None:
        self.tensors = [t if isinstance(t, torch.Tensor) else torch.as_tensor(np.asarray(t))
                        for t in tensors]
        self.single = single
        sizes = {int(t.shape[0]) if t.dim() else -1 for t in self.tensors}
        if len(sizes) != 1 or -1 in sizes:
            raise DataError("data holds arrays of different lengths "
                            f"{[tuple(t.shape) for t in self.tensors]}: every array needs one "
                            "row per example")
        self.size = sizes.pop()

    def take(self, index: np.ndarray) -> Any:
        idx = torch.from_numpy(index)
        batch = [t.index_select(0, idx) for t in self.tensors]  # cheaper than t[idx]
        return batch[0] if self.single else tuple(batch)


class _Dataset:
    """A map-style dataset (``__len__`` and ``__getitem__``) and a collate function."""

    def __init__(self, dataset: Any, collate: Any) -> None:
        self.dataset = dataset
        self.collate = collate or torch.utils.data.default_collate
        self.size = len(dataset)

    def take(self, index: np.ndarray) -> Any:
        if len(index):
            return self.collate([self.dataset[int(i)] for i in index])
        return _empty_like(self.collate([self.dataset[0]]))


def _empty_like(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, dict):
        return {k: _empty_like(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_empty_like(v) for v in batch)
    return batch


def as_source(data: Any) -> _Tensors | _Dataset:
    """Wrap ``data``: arrays/tensors (one or a tuple), a map-style Dataset or a DataLoader."""
    if isinstance(data, torch.utils.data.DataLoader):
        return _Dataset(data.dataset, data.collate_fn)
    if isinstance(data, (torch.Tensor, np.ndarray)):
        return _Tensors([data], single=True)
    if isinstance(data, (tuple, list)) and data and all(
            isinstance(t, (torch.Tensor, np.ndarray)) for t in data):
        return _Tensors(list(data), single=False)
    if isinstance(data, torch.utils.data.TensorDataset):
        return _Tensors(list(data.tensors), single=False)
    if hasattr(data, "__len__") and hasattr(data, "__getitem__"):
        return _Dataset(data, None)
    raise ConfigError(f"data={type(data).__name__} is not allowed: pass a tensor or array, a "
                      "tuple of them (e.g. (X, y)), a map-style Dataset or a DataLoader")


class PrivateLoader:
    """Logical batches by Poisson or fixed-size sampling, yielded in physical chunks.

    One iteration is one epoch of ``plan.steps_per_epoch`` logical batches. Made by
    :func:`~veil.learn.dpsgd.make_private`, which charged the privacy cost of all
    ``plan.steps`` batches to the ledger before the first one is drawn.
    """

    def __init__(self, source: _Tensors | _Dataset, plan: Any, counter: StepCounter,
                 rng: Generator, max_physical_batch_size: int | None = None) -> None:
        self.source = source
        self.plan = plan
        self.counter = counter
        self.rng = rng
        self.max_physical_batch_size = max_physical_batch_size
        self._trials = Rows(lambda m: rng.bernoulli(plan.sample_rate, m), source.size,
                            plan.steps)

    def __len__(self) -> int:
        """Logical batches per epoch (each may come in several physical chunks)."""
        return self.plan.steps_per_epoch

    @property
    def steps_left(self) -> int:
        """Logical batches that can still be drawn under the charged plan."""
        return self.counter.planned - self.counter.sampled

    def sample_indices(self) -> np.ndarray:
        """The indices of one logical batch (ascending)."""
        if self.plan.sampling == "poisson":  # N Bernoulli(q) trials, drawn for several steps
            return np.flatnonzero(self._trials.next())
        return np.sort(self.rng.choice(self.source.size, self.plan.batch_size, replace=False))

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.plan.steps_per_epoch):
            batch = self.counter.begin_batch()
            index = self.sample_indices()
            cap = self.max_physical_batch_size or max(len(index), 1)
            chunks = max(1, math.ceil(len(index) / cap))
            for k in range(chunks):
                part = index[k * cap:(k + 1) * cap]
                self.counter.announce(batch, len(part), k == chunks - 1)
                yield self.source.take(part)
