"""Membership-inference attacks against any classifier.

The target is a fitted model with ``predict_proba`` (scikit-learn API) or a callable
``X -> probabilities`` (an (n, classes) array, or (n,) positive-class probabilities). Every
attack returns one score per candidate record, higher meaning "more likely a member".

* ``loss`` — Yeom, Giacomelli, Fredrikson & Jha (2018), "Privacy risk in machine learning":
  members tend to have lower loss; score = -cross-entropy = log p_y(x). (Yeom's decision rule
  thresholds at the average training loss; the ROC covers every threshold.)
* ``confidence`` — the model's probability of the true label, p_y(x) (Yeom et al. 2018;
  Salem et al. 2019).
* ``shadow`` — Shokri, Stronati, Song & Shmatikov (2017), "Membership inference attacks
  against machine learning models": ``n_shadow`` shadow models of the same kind are trained
  on random halves of a ``population`` from the same distribution (disjoint from the target's
  training set); one attack classifier per true label learns, from the shadows' prediction
  vectors (as log-probabilities), to tell the shadows' training records from the rest. The
  score is the attack classifier's probability of "member".
* ``lira`` / ``lira-offline`` — Carlini, Chien, Nasr, Song, Terzis & Tramèr (2022),
  "Membership inference attacks from first principles" (the likelihood-ratio attack). The
  statistic is the logit-scaled confidence phi = log(p_y / (1 - p_y)). ``n_shadow`` shadow
  models are trained on halves of the pool = candidates (+ ``population``), each candidate in
  exactly half of them. Online: fit Gaussians N(mu_in, s_in^2) and N(mu_out, s_out^2) to phi
  over the shadows that did / did not train on the record and score the log-likelihood ratio
  of the target's phi. Offline (only OUT shadows needed): score = Phi((phi - mu_out) / s_out),
  the one-sided test. With fewer than 64 shadows the variances are pooled over all records
  (the paper's "fixed variance" variant, more stable for few shadows).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import log_ndtr
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression as _AttackModel

from veil._validation import check_choice, check_int, check_pair
from veil.audit.epsilon import EpsilonBound, epsilon_lower_bound
from veil.audit.metrics import attack_metrics, check_scores, roc_curve
from veil.errors import ConfigError, DataError
from veil.random import check_rng

logger = logging.getLogger(__name__)

ATTACKS = ("loss", "confidence", "shadow", "lira", "lira-offline")
_TINY = 1e-12
_FIXED_VARIANCE_BELOW = 64


@dataclass(frozen=True)
class AttackResult:
    """Scores of one attack on members and non-members, with the metrics they imply."""

    attack: str
    member_scores: np.ndarray = field(repr=False)
    nonmember_scores: np.ndarray = field(repr=False)

    @classmethod
    def from_scores(cls, member_scores, nonmember_scores, attack: str = "given") -> AttackResult:
        ins, outs = check_scores(member_scores, nonmember_scores)
        return cls(attack, ins, outs)

    def metrics(self) -> dict[str, float]:
        """AUC, advantage, TPR at FPR 0.1% and 1% (see :mod:`veil.audit.metrics`)."""
        return attack_metrics(self.member_scores, self.nonmember_scores)

    def roc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fpr, tpr, thresholds)."""
        return roc_curve(self.member_scores, self.nonmember_scores)

    def at_threshold(self, threshold: float) -> tuple[float, float]:
        """(TPR, FPR) of the rule "member iff score >= threshold"."""
        return (float(np.mean(self.member_scores >= threshold)),
                float(np.mean(self.nonmember_scores >= threshold)))

    def epsilon_lower_bound(self, **options) -> EpsilonBound:
        """:func:`veil.audit.epsilon_lower_bound` on these scores. Valid as a bound on the
        training algorithm only when each score comes from an independent trial."""
        return epsilon_lower_bound(self.member_scores, self.nonmember_scores, **options)


# -- the target ------------------------------------------------------------------------------
def _probabilities(model: Any, X: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """(n, len(classes)) class probabilities of a model, aligned to ``classes``."""
    if hasattr(model, "predict_proba"):
        raw = np.asarray(model.predict_proba(X), dtype=np.float64)
    elif callable(model):
        raw = np.asarray(model(X), dtype=np.float64)
    else:
        raise ConfigError(f"model={type(model).__name__} is not allowed: need an object with "
                          "predict_proba(X) or a callable X -> probabilities")
    if raw.ndim == 1:
        raw = np.column_stack([1.0 - raw, raw])
    if raw.ndim != 2 or raw.shape[0] != X.shape[0]:
        raise DataError(f"the model returned probabilities of shape {raw.shape} for "
                        f"{X.shape[0]} rows; expected (rows, classes)")
    if not np.all(np.isfinite(raw)) or raw.min() < -1e-9 or raw.max() > 1 + 1e-9:
        raise DataError("the model returned values outside [0, 1]: pass probabilities, "
                        "not logits or labels")
    model_classes = getattr(model, "classes_", None)
    if model_classes is None:
        if raw.shape[1] != classes.size:
            raise DataError(f"the model returned {raw.shape[1]} probability columns but the "
                            f"labels have {classes.size} classes; give the model a classes_ "
                            "attribute or return one column per class")
        return raw
    out = np.zeros((X.shape[0], classes.size))
    out[:, _label_index(np.asarray(model_classes), classes, "the model's classes_")] = raw
    return out


def _label_index(y: np.ndarray, classes: np.ndarray, name: str) -> np.ndarray:
    """Position of each label of ``y`` in ``classes`` (in any order)."""
    order = np.argsort(classes, kind="stable")
    ranked = classes[order]
    pos = np.minimum(np.searchsorted(ranked, y), classes.size - 1)
    bad = ranked[pos] != y
    if np.any(bad):
        raise DataError(f"{name} holds labels the model does not know, e.g. {y[bad][0]!r}; "
                        f"known classes: {classes.tolist()}")
    return order[pos]


def _true_class_logprob(model, X, y_idx, classes) -> tuple[np.ndarray, np.ndarray]:
    """log p_y and log(1 - p_y) per row.

    1 - p_y is taken as the sum of the other classes' probabilities, which keeps its precision
    when p_y rounds to 1 (a confident model), and log p_y = log1p(-(1 - p_y)) there.
    """
    p = np.clip(_probabilities(model, X, classes), 0.0, 1.0)
    p = p / p.sum(axis=1, keepdims=True)
    rows = np.arange(X.shape[0])
    p_true = p[rows, y_idx]
    others = np.ones(p.shape, dtype=bool)
    others[rows, y_idx] = False
    rest = np.where(others, p, 0.0).sum(axis=1)
    log_true = np.where(p_true > 0.5, np.log1p(-np.minimum(rest, 0.5)),
                        np.log(np.maximum(p_true, _TINY)))
    return log_true, np.log(np.maximum(rest, _TINY))


def _logit_confidence(model, X, y_idx, classes) -> np.ndarray:
    """phi = log p_y - log(1 - p_y) (Carlini et al. 2022)."""
    lp, lrest = _true_class_logprob(model, X, y_idx, classes)
    return lp - lrest


def _train(shadow: Any, X: np.ndarray, y: np.ndarray) -> Any:
    """A shadow model: clone-and-fit a scikit-learn estimator, or call a trainer."""
    if hasattr(shadow, "fit"):
        return clone(shadow).fit(X, y)
    if callable(shadow):
        return shadow(X, y)
    raise ConfigError(f"shadow={type(shadow).__name__} is not allowed: an unfitted estimator "
                      "with fit(X, y), or a callable (X, y) -> fitted model")


# -- attacks ---------------------------------------------------------------------------------
def _classes(target, *label_sets) -> np.ndarray:
    classes = getattr(target, "classes_", None)
    if classes is None:
        classes = np.unique(np.concatenate(label_sets))
    return np.asarray(classes)


def loss_scores(model: Any, X, y) -> np.ndarray:
    """The loss attack's score of each record: log p_y(x) = -cross-entropy (higher = member)."""
    X, y = check_pair((X, y), "records")
    classes = _classes(model, y)
    scores, _ = _true_class_logprob(model, X, _label_index(y, classes, "y"), classes)
    return scores


def _log_proba(model, X, classes) -> np.ndarray:
    return np.log(np.maximum(_probabilities(model, X, classes), _TINY))


def _shadow_attack(target, shadow, population, X, y_idx, classes, n_shadow, rng) -> np.ndarray:
    """Shokri et al.: per-label attack classifiers trained on shadow models' outputs."""
    pX, py = population
    py_idx = _label_index(py, classes, "population")
    n = pX.shape[0]
    feats, member = [], []
    for i in range(n_shadow):
        inside = np.zeros(n, dtype=bool)
        inside[rng.permutation(n)[: n // 2]] = True
        model = _train(shadow, pX[inside], py[inside])
        feats.append(_log_proba(model, pX, classes))
        member.append(inside)
        logger.info("shadow model %d/%d trained", i + 1, n_shadow)
    F, M, L = np.vstack(feats), np.concatenate(member), np.tile(py_idx, n_shadow)
    pooled = _AttackModel(max_iter=1000).fit(F, M)
    target_F = _log_proba(target, X, classes)
    scores = np.empty(X.shape[0])
    for c in np.unique(y_idx):
        rows = L == c
        enough = min(M[rows].sum(), (~M[rows]).sum()) >= 10
        attack = _AttackModel(max_iter=1000).fit(F[rows], M[rows]) if enough else pooled
        cand = y_idx == c
        scores[cand] = attack.predict_proba(target_F[cand])[:, 1]
    return scores


def _gaussian_logpdf(x, mu, sd) -> np.ndarray:
    return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd)


def _lira(target, shadow, X, y, y_idx, population, classes, n_shadow, online, rng):
    """Carlini et al.: per-record Gaussian likelihood ratio of the logit-scaled confidence."""
    pool_X, pool_y = X, y
    if population is not None:
        pool_X = np.vstack([X, population[0]])
        pool_y = np.concatenate([y, population[1]])
    n, m = pool_X.shape[0], X.shape[0]
    # every pool record is in exactly half of the shadows: rank random keys per record
    keys = rng.random((n_shadow, n))
    keep = np.argsort(np.argsort(keys, axis=0), axis=0) < n_shadow // 2
    phi = np.empty((n_shadow, m))
    for i in range(n_shadow):
        model = _train(shadow, pool_X[keep[i]], pool_y[keep[i]])
        phi[i] = _logit_confidence(model, X, y_idx, classes)
        logger.info("LiRA shadow model %d/%d trained", i + 1, n_shadow)
    observed = _logit_confidence(target, X, y_idx, classes)
    inside = keep[:, :m]
    half = n_shadow // 2
    mu_in = np.where(inside, phi, 0.0).sum(0) / half
    mu_out = np.where(~inside, phi, 0.0).sum(0) / half
    if n_shadow < _FIXED_VARIANCE_BELOW:
        sd_in = np.std((phi - mu_in)[inside]) + _TINY
        sd_out = np.std((phi - mu_out)[~inside]) + _TINY
    else:
        sd_in = np.sqrt(np.where(inside, (phi - mu_in) ** 2, 0.0).sum(0) / half) + _TINY
        sd_out = np.sqrt(np.where(~inside, (phi - mu_out) ** 2, 0.0).sum(0) / half) + _TINY
    if online:
        return _gaussian_logpdf(observed, mu_in, sd_in) - _gaussian_logpdf(observed, mu_out,
                                                                             sd_out)
    return log_ndtr((observed - mu_out) / sd_out)  # log of the one-sided test's Phi


def membership_inference(target: Any, members, nonmembers, *, attack: str = "loss",
                         shadow: Any = None, population=None, n_shadow: int = 16,
                         rng=None) -> AttackResult:
    """Run a membership-inference ``attack`` on ``target``'s ``members`` and ``nonmembers``.

    ``members`` / ``nonmembers``: pairs ``(X, y)``. ``attack``: ``loss``, ``confidence``
    (label-free: the highest class probability), ``shadow``, ``lira`` or ``lira-offline``
    (see the module docstring). ``shadow``: how shadow models are made — an unfitted
    estimator (cloned per shadow) or a callable ``(X, y) -> fitted model``; it defaults to a
    clone of ``target`` when the target is a scikit-learn estimator. ``population``: ``(X, y)``
    from the same distribution, disjoint from the target's training set (needed by
    ``shadow``; extra pool records for ``lira``).
    """
    check_choice(attack, "attack", ATTACKS)
    Xi, yi = check_pair(members, "members")
    Xo, yo = check_pair(nonmembers, "nonmembers")
    if Xi.shape[1] != Xo.shape[1]:
        raise DataError(f"members have {Xi.shape[1]} features and nonmembers {Xo.shape[1]}; "
                        "both must be rows of the same feature space")
    if population is not None:
        population = check_pair(population, "population")
        if population[0].shape[1] != Xi.shape[1]:
            raise DataError(f"population has {population[0].shape[1]} features, the members "
                            f"{Xi.shape[1]}")
    X, y = np.vstack([Xi, Xo]), np.concatenate([yi, yo])
    classes = _classes(target, y, *(() if population is None else (population[1],)))
    y_idx = _label_index(y, classes, "members/nonmembers")
    if attack == "loss":
        scores, _ = _true_class_logprob(target, X, y_idx, classes)
    elif attack == "confidence":
        scores = _probabilities(target, X, classes).max(axis=1)
    else:
        if shadow is None:
            if not hasattr(target, "fit"):
                raise ConfigError(f"attack={attack!r} needs shadow=: an unfitted estimator like "
                                  "the target, or a callable (X, y) -> fitted model")
            shadow = target
        rng = check_rng(rng)
        if attack == "shadow":
            n_shadow = check_int(n_shadow, "n_shadow", low=1)
            if population is None:
                raise ConfigError("attack='shadow' needs population=(X, y): data from the same "
                                  "distribution, disjoint from the target's training set")
            scores = _shadow_attack(target, shadow, population, X, y_idx, classes, n_shadow,
                                    rng)
        else:
            n_shadow = check_int(n_shadow, "n_shadow", low=4)
            if n_shadow % 2:
                raise ConfigError(f"n_shadow={n_shadow} is not allowed for LiRA: use an even "
                                  "number (each record is in exactly half of the shadows)")
            scores = _lira(target, shadow, X, y, y_idx, population, classes, n_shadow,
                           attack == "lira", rng)
    return AttackResult(attack, scores[: Xi.shape[0]], scores[Xi.shape[0]:])


__all__ = ["ATTACKS", "AttackResult", "membership_inference", "loss_scores"]
