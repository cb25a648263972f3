"""Full-batch gradient descent as aggregate queries (the hybrid approach's gradient learner).

:class:`GradientQueries` is a :class:`veil.learn.queries.QueryLearner` whose answers are
sums of clipped per-example gradients (:func:`veil.dp.sensitivity.clip_l2`, or
:func:`veil.learn.dpsgd.clipped_grad_sum` for torch models), so that their sensitivity is
bounded and the noise of :mod:`veil.fl.hybrid` makes them private.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil._validation import check_array, check_int, check_positive
from veil.dp.sensitivity import clip_l2
from veil.errors import ConfigError
from veil.learn.base import GradientClassifier
from veil.learn.queries import Query, QueryAnswer, QueryLearner, QueryShape, checked_values
from veil.learn.torch_model import TorchModel

__all__ = ["GradientQueries"]

GRADIENT_BITS = 16


class GradientQueries(QueryLearner):
    """Full-batch gradient descent on a veil.learn model from noisy gradient sums.

    Round r asks every party for ``sum_i [clip(g_i), c]`` over its records: the per-example
    gradients at the current parameters clipped to L2 norm C (numpy models:
    :func:`veil.dp.sensitivity.clip_l2` on ``per_example_gradients``; torch models:
    :func:`veil.learn.dpsgd.clipped_grad_sum`), and ``c = count_weight * C`` per record, a
    record count. One record moves the sum by at most ``C sqrt(1 + count_weight^2)`` in L2.
    The learner divides the gradient sum by the mean of the noisy counts so far (the count
    is the same every round, so averaging is post-processing) and steps
    ``w <- w - learning_rate (g / N + alpha M w)`` (the penalty is data-free).

    ``model`` must be initialized (``model.initialize(n_features, classes)``: the schema is
    public). ``max_records`` bounds one party's record count, hence its answer.
    """

    def __init__(self, model: Any, *, rounds: int = 30, learning_rate: float = 1.0,
                 clip_norm: float = 1.0, count_weight: float = 0.25,
                 max_records: int = 2 ** 20) -> None:
        if not isinstance(model, GradientClassifier) or not hasattr(model, "classes_"):
            raise ConfigError(f"model={model!r} is not allowed: expected an initialized "
                              "veil.learn model (call model.initialize(n_features, classes))")
        self._model = model
        self.rounds = check_int(rounds, "rounds", low=1)
        self.learning_rate = check_positive(learning_rate, "learning_rate")
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.count_weight = check_positive(count_weight, "count_weight")
        self.max_records = check_int(max_records, "max_records", low=1)
        self.params = model.get_params_vector()
        self.round = 0
        self.counts: list[float] = []
        p, c = self.params.size, self.clip_norm
        self.shape = QueryShape(
            size=p + 1, l1=c * (math.sqrt(p) + self.count_weight),
            l2=c * math.hypot(1.0, self.count_weight), bound=self.max_records * c,
            frac_bits=max(0, GRADIENT_BITS - math.ceil(math.log2(c))))

    @property
    def model(self) -> Any:
        return self._model.set_params_vector(self.params)

    def plan(self) -> list[QueryShape]:
        return [self.shape] * self.rounds

    def next_query(self) -> Query | None:
        if self.round >= self.rounds:
            return None
        return Query(f"gradient round {self.round}", self.shape, {"params": self.params})

    def answer(self, query: Query, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
        params = check_array(query.spec["params"], "params", ndim=1)
        model = self._model.set_params_vector(params)
        if isinstance(model, TorchModel):
            total, clipped = _torch_clipped_sum(model, X, y, self.clip_norm)
        else:
            grads, clipped = clip_l2(model.per_example_gradients(X, y), self.clip_norm)
            total = grads.sum(axis=0)
        count = self.count_weight * self.clip_norm * X.shape[0]
        return np.append(total, count), clipped

    def update(self, query: Query, aggregate: QueryAnswer) -> None:
        values = checked_values(query, aggregate)
        p = self.params.size
        self.counts.append(float(values[p]) / (self.count_weight * self.clip_norm))
        n = max(1.0, float(np.mean(self.counts)))
        step = values[:p] / n
        alpha = float(getattr(self._model, "alpha", 0.0) or 0.0)
        if alpha:
            step = step + alpha * self._model._regularized() * self.params
        self.params = self.params - self.learning_rate * step
        self.round += 1


def _torch_clipped_sum(model: Any, X: np.ndarray, y: np.ndarray,
                       clip_norm: float) -> tuple[np.ndarray, int]:
    """The clipped per-example gradient sum of a TorchModel (veil.learn.dpsgd)."""
    import torch

    from veil.learn.dpsgd import clipped_grad_sum

    inputs = torch.from_numpy(np.ascontiguousarray(X)).to(model._dtype)
    targets = torch.from_numpy(model._codes(np.asarray(y), X.shape[0]).astype(np.int64))
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    result = clipped_grad_sum(model.module_, loss, inputs, targets, clip_norm)
    return result.grad.detach().to(torch.float64).numpy(), int(result.n_clipped)
