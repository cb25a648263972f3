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

Saved models: :mod:`veil.learn.model_format` (arrays and JSON, no pickle).

``import veil.learn`` imports a module only when a name from it is first used
(:mod:`veil._lazy`), and never :mod:`veil.dp` or :mod:`veil.crypto`: the private models
(:mod:`veil.learn.private`, :mod:`veil.learn.dpsgd`) sit a layer above them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:
    from veil.learn.base import GradientClassifier, sgd
    from veil.learn.linear import LinearSVC, LogisticRegression, SoftmaxRegression
    from veil.learn.queries import QueryLearner
    from veil.learn.torch_model import TorchModel
    from veil.learn.tree import ID3Classifier, ID3Queries

__all__ = ["GradientClassifier", "ID3Classifier", "ID3Queries", "LinearSVC", "LogisticRegression",
           "QueryLearner", "SoftmaxRegression", "TorchModel", "sgd"]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
