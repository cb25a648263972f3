"""Models trained in the clear or through queries, with one interface for all of them.

Every model is a scikit-learn classifier (``fit / predict / score``) with a flat parameter
vector (``get_params_vector / set_params_vector``) and closed-form or autograd per-example
gradients (``per_example_gradients(X, y)``); see :mod:`veil.learn.base`.

* numpy: :class:`LogisticRegression`, :class:`SoftmaxRegression`, :class:`LinearSVC`;
* torch (optional extra): :class:`TorchModel` wraps any ``nn.Module`` (imported lazily);
* learners as aggregate queries (:mod:`veil.learn.queries`: :class:`QueryLearner`) and ID3
  trees (:mod:`veil.learn.tree`: :class:`ID3Classifier`, :class:`ID3Queries`), for the
  hybrid approach to private federated learning (:mod:`veil.fl.hybrid`; the gradient
  learner is :class:`veil.learn.private.GradientQueries`).

``import veil.learn`` loads neither :mod:`veil.dp` nor :mod:`veil.crypto`: the private
models (:mod:`veil.learn.private`, :mod:`veil.learn.dpsgd`) sit a layer above them.
"""

from __future__ import annotations

from typing import Any

from veil.learn.base import GradientClassifier, sgd
from veil.learn.linear import LinearSVC, LogisticRegression, SoftmaxRegression
from veil.learn.queries import QueryLearner
from veil.learn.tree import ID3Classifier, ID3Queries


def __getattr__(name: str) -> Any:
    if name == "TorchModel":  # keeps `import veil.learn` free of torch
        from veil.learn.torch_model import TorchModel

        return TorchModel
    raise AttributeError(f"module 'veil.learn' has no attribute {name!r}")


__all__ = ["GradientClassifier", "ID3Classifier", "ID3Queries", "LinearSVC", "LogisticRegression",
           "QueryLearner", "SoftmaxRegression", "TorchModel", "sgd"]
