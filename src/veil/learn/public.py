"""Public facts a private model uses without a charge: its label set and its dataset size.

**The neighbour relation.** veil's guarantees are stated for *add/remove* neighbours: two
datasets are neighbours when one is the other with one record added (or removed). Under this
relation the number of records ``n`` is private (a neighbour has ``n + 1``), and so is the
set of labels that occur (one record can bring a new label). Anything computed from them
(the sampling rate ``q = b / n`` of DP-SGD, its step count and the sigma calibrated to
them, the averaging denominator, the rows of ``coef_``) releases them, unless it comes from
a *declared* public value:

* ``classes=[...]``: the label set, declared (public schema knowledge, as the feature
  names). ``classes="from_data"`` opts in to reading ``np.unique(y)``, with a warning.
* ``n=N`` (``dataset_size=N`` for :func:`veil.learn.dpsgd.make_private`): a public size,
  e.g. published with the dataset. The Poisson sampler then draws every record with
  probability ``q = b / N`` whatever the true size, which is add/remove DP as accounted
  (Abadi et al. 2016; Mironov, Talwar & Zhang 2019). ``"public"`` declares that the true
  size is public (the *replace-one* relation, where ``n`` is the same for neighbours):
  ``len(X)`` is then used, silently. ``None`` (the default, kept for compatibility) uses
  ``len(X)`` with a warning that the size is treated as public.
* ``dataset_size=EstimatedSize(epsilon_n)`` (:mod:`veil.learn.dpsgd.size`): no
  public size; a declared slice ``epsilon_n`` of the budget buys a private count, charged
  to the ledger (the two-sided geometric mechanism, exact on the integers; a count has
  sensitivity 1 under add/remove), and the rest of the budget goes to DP-SGD. Any released
  N keeps DP-SGD private (the sampler draws with ``q = b / N`` and the accounting uses that
  same q), so N only has to be released, not exact; veil uses a lower confidence bound,
  ``N = noisy count - ceil(t ln(1 / (1 - confidence)))`` (t the noise scale; the noise
  exceeds the margin with probability <= 1 - confidence), so that the expected batch
  ``q n`` is at least the requested one with that confidence.

No exact private count goes into a log or an error message (diagnostics for the curator are
returned on results, never logged).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from veil._validation import check_int
from veil.errors import ConfigError, DataError

__all__ = ["PublicFactWarning", "declared_classes", "declared_size"]


class PublicFactWarning(UserWarning):
    """A private value (the label set, the dataset size) is used as if it were public."""


def declared_classes(classes: Any, y: np.ndarray, owner: str) -> np.ndarray:
    """The label set: ``classes`` as declared, or ``np.unique(y)`` with ``"from_data"``."""
    if isinstance(classes, str) and classes == "from_data":
        warnings.warn(f"{owner}: the label set is read from the data (classes='from_data'): "
                      "one relabelled record can add a class; declare classes=[...] to keep "
                      "it out of the release", PublicFactWarning, stacklevel=3)
        return np.unique(y)
    if classes is None or isinstance(classes, str):
        raise ConfigError(f"{owner}: classes={classes!r} is not allowed: declare the label "
                          "set, classes=[...] (public schema knowledge), or opt in to reading "
                          "it from the data with classes='from_data'")
    declared = np.asarray(classes)
    if declared.ndim != 1 or np.unique(declared).size != declared.size:
        raise ConfigError(f"{owner}: classes={classes!r} is not allowed: expected a list of "
                          "distinct labels")
    if not np.all(np.isin(y, declared)):  # names no count and no value of the data
        raise DataError(f"{owner}: y holds labels outside the declared classes")
    return declared


def declared_size(n: Any, actual: int, owner: str, name: str = "n") -> int:
    """The dataset size to compute ``q``, steps and sigma with (see the module docstring)."""
    if isinstance(n, str) and n == "public":
        return actual
    if n is None:
        warnings.warn(f"{owner}: the dataset size is treated as public (it sets the sampling "
                      f"rate, the step count and sigma); declare {name}=<public size> (or "
                      f"{name}='public' if the true size is public)", PublicFactWarning,
                      stacklevel=3)
        return actual
    if isinstance(n, str):
        raise ConfigError(f"{owner}: {name}={n!r} is not allowed: expected a public size "
                          "(int), 'public' or None")
    return check_int(n, name, low=1)

