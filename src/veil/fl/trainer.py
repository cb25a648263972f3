"""A client's local data and model: what local training runs on."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from veil._validation import check_xy
from veil.errors import DataError
from veil.random import RngLike

if TYPE_CHECKING:
    from veil.learn.base import GradientClassifier

__all__ = ["LocalTrainer"]


class LocalTrainer:
    """One client's examples ``(X, y)`` and its own copy of the (initialized) model.

    :meth:`train` loads the global parameters, runs local SGD and returns the new
    parameters; the data never leaves the object. ``n_params``: the model's parameter
    count (what the protocols check messages against without loading the model).

    Pickled (a Flower node keeps its party in ``context.state`` between the fresh processes
    of its messages: :mod:`veil.fl.runtime.flower`), the model travels as its own pickle
    and is rebuilt on first use, so a process that never trains -- most stages of a SecAgg+
    round -- never imports scikit-learn (issue 30, round latency).
    """

    def __init__(self, model: GradientClassifier, X: Any, y: Any) -> None:
        from veil.learn.base import GradientClassifier  # lazy: scikit-learn

        if not isinstance(model, GradientClassifier):
            raise DataError(f"model is a {type(model).__name__}; expected a veil.learn model")
        self._model: Any = copy.deepcopy(model)
        self.X, self.y = check_xy(X, y)
        self._model._codes(self.y, self.X.shape[0])  # labels must be among the model's classes
        self.n_params = int(model.n_params_)

    @property
    def model(self) -> GradientClassifier:
        if isinstance(self._model, bytes):
            # this trainer's own pickle of its model (__getstate__), never another's
            self._model = pickle.loads(self._model)  # noqa: S301
        return self._model

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if not isinstance(self._model, bytes):
            state["_model"] = pickle.dumps(self._model, protocol=pickle.HIGHEST_PROTOCOL)
        return state

    @property
    def n_examples(self) -> int:
        return int(self.X.shape[0])

    def train(self, params: np.ndarray, *, epochs: int, learning_rate: float,
              batch_size: int | None, rng: RngLike,
              penalty: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """Local SGD from ``params``; returns the parameters after training."""
        from veil.learn.base import sgd

        self.model.set_params_vector(params)
        sgd(self.model, self.X, self.y, epochs=epochs, learning_rate=learning_rate,
            batch_size=batch_size, rng=rng, penalty=penalty)
        return self.model.get_params_vector()
