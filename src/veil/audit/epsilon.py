"""Empirical lower bounds on epsilon from membership-inference outcomes.

If a training algorithm is (epsilon, delta)-DP then, for any attack that answers "member"
when its score is at least a threshold (Kairouz, Oh & Viswanath 2015; Jagielski, Ullman &
Oprea 2020, "Auditing differentially private machine learning: how private is private SGD?";
Nasr et al. 2021, "Adversary instantiation"),

    TPR <= e^eps FPR + delta      and      1 - FPR <= e^eps (1 - TPR) + delta,

so   eps >= log((TPR - delta) / FPR)   and   eps >= log((1 - FPR - delta) / (1 - TPR)).

TPR and FPR are only estimated, from n_in member and n_out non-member trials. With
one-sided Clopper–Pearson bounds at level alpha/2 each (alpha = 1 - confidence), the event
{TPR >= TPR_lo, FPR <= FPR_hi} has probability at least 1 - alpha, and on it both bounds
above hold with TPR_lo and FPR_hi in place of TPR and FPR (each bound rises with TPR and
falls with FPR). So

    eps_lb = max( log((TPR_lo - delta) / FPR_hi), log((1 - FPR_hi - delta) / (1 - TPR_lo)) )

is a lower bound on the true epsilon with probability >= confidence — provided the threshold
was chosen without looking at the trials it is evaluated on. Choosing the best of many
thresholds on the same trials would overstate the bound, so the threshold is either given
(``threshold=<float>``, fixed in advance) or chosen on a random half of the trials and
certified on the other half (``threshold="split"``, the default).

Clopper–Pearson (1934): for k successes in n trials, the one-sided lower bound at level a is
the a-quantile of Beta(k, n - k + 1) (0 when k = 0) and the upper bound the (1 - a)-quantile
of Beta(k + 1, n - k) (1 when k = n).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import betaincinv

from veil._validation import check_choice, check_delta, check_probability
from veil.audit.metrics import check_scores
from veil.errors import ConfigError, DataError
from veil.random import check_rng


def clopper_pearson(successes, trials, confidence: float = 0.95, *,
                    side: str = "two-sided") -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial confidence bounds (lower, upper) for a success probability.

    ``side="two-sided"`` puts (1 - confidence)/2 in each tail; ``"lower"`` / ``"upper"``
    put all of it in one tail (the other bound is then 1 / 0). Vectorised over arrays.
    """
    check_choice(side, "side", ["two-sided", "lower", "upper"])
    c = check_probability(confidence, "confidence", low_open=True, high_open=True)
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n) or np.any(k != np.round(k)):
        raise ConfigError(f"successes={successes!r}, trials={trials!r} are not allowed: need "
                          "integers 0 <= successes <= trials, trials >= 1")
    a = 1.0 - c if side != "two-sided" else (1.0 - c) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, betaincinv(k, n - k + 1, a), 0.0)
        hi = np.where(k < n, betaincinv(k + 1, n - k, 1.0 - a), 1.0)
    if side == "lower":
        hi = np.ones_like(hi)
    elif side == "upper":
        lo = np.zeros_like(lo)
    return lo, hi


def _rate_bounds(hits_in, n_in, hits_out, n_out, alpha: float):
    """TPR lower and FPR upper bound, each one-sided at alpha / 2."""
    tpr_lo, _ = clopper_pearson(hits_in, n_in, 1.0 - alpha / 2.0, side="lower")
    _, fpr_hi = clopper_pearson(hits_out, n_out, 1.0 - alpha / 2.0, side="upper")
    return tpr_lo, fpr_hi


def _epsilon_from_rates(tpr_lo, fpr_hi, delta: float) -> np.ndarray:
    """max of the two DP inequalities solved for epsilon (-inf where neither bites)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log(np.clip(tpr_lo - delta, 0.0, None) / fpr_hi)
        mirror = np.log(np.clip(1.0 - fpr_hi - delta, 0.0, None) / (1.0 - tpr_lo))
    return np.nan_to_num(np.maximum(direct, mirror), nan=-np.inf)


def _perfect_bound(n_in: int, n_out: int, delta: float, alpha: float) -> float:
    """The bound a perfect attack (TPR = 1, FPR = 0) would certify from these many trials."""
    tpr_lo, fpr_hi = _rate_bounds(n_in, n_in, 0, n_out, alpha)
    return float(_epsilon_from_rates(tpr_lo, fpr_hi, delta))


def audit_samples_needed(epsilon: float = 0.0, *, delta: float = 0.0,
                         confidence: float = 0.95, split: bool = True) -> int:
    """Members (and as many non-members) needed before even a perfect attack can certify
    more than ``epsilon`` at this confidence.

    A perfect attack gives TPR_lo = a and FPR_hi = 1 - a with a = (alpha/2)^(1/n); the bound
    exceeds epsilon iff a > (e^eps + delta) / (1 + e^eps), i.e.
    n > log(alpha/2) / log((e^eps + delta) / (1 + e^eps)). With ``split`` the trials are
    halved (threshold selection): 2n - 1 trials leave n to certify.
    """
    if epsilon < 0 or not math.isfinite(epsilon):
        raise ConfigError(f"epsilon={epsilon!r} is not allowed: must be finite and >= 0")
    d = check_delta(delta)
    c = check_probability(confidence, "confidence", low_open=True, high_open=True)
    target = (math.exp(epsilon) + d) / (1.0 + math.exp(epsilon))
    n = math.floor(math.log((1.0 - c) / 2.0) / math.log(target)) + 1
    return 2 * n - 1 if split else n


@dataclass(frozen=True)
class EpsilonBound:
    """An empirical lower bound: the true epsilon is >= ``epsilon`` with prob. ``confidence``.

    ``max_certifiable`` is the largest bound a perfect attack could show with these many
    trials: an audit can never certify more, whatever the truth.
    """

    epsilon: float
    confidence: float
    delta: float
    method: str
    threshold: float
    tpr_lower: float
    fpr_upper: float
    n_members: int
    n_nonmembers: int
    max_certifiable: float

    def to_dict(self) -> dict:
        return asdict(self)


def _hits(scores_sorted: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many scores are >= each threshold (scores sorted ascending)."""
    return scores_sorted.size - np.searchsorted(scores_sorted, thresholds, side="left")


def _best_threshold(ins: np.ndarray, outs: np.ndarray, delta: float, alpha: float) -> float:
    ins_s, outs_s = np.sort(ins), np.sort(outs)
    candidates = np.unique(np.concatenate([ins, outs]))
    tpr_lo, fpr_hi = _rate_bounds(_hits(ins_s, candidates), ins.size,
                                  _hits(outs_s, candidates), outs.size, alpha)
    return float(candidates[int(np.argmax(_epsilon_from_rates(tpr_lo, fpr_hi, delta)))])


def epsilon_lower_bound(member_scores, nonmember_scores, *, delta: float = 0.0,
                        confidence: float = 0.95, threshold: float | str = "split",
                        rng=None) -> EpsilonBound:
    """Lower-bound epsilon from attack scores on member and non-member trials.

    Each score comes from one trial: a model trained *with* the target record (member) or
    *without* it (non-member), scored by the attack (higher = member). For a bound on the
    training algorithm the trials must be independent runs (or, for one training run with many
    canaries, use :func:`veil.audit.one_run_epsilon_lower_bound`).

    ``threshold``: a float fixed in advance (all trials certify), or ``"split"`` (choose the
    best threshold on a random half, certify on the other half). Raises ``DataError`` when
    there are too few trials for any positive bound, saying how many are needed.
    """
    ins, outs = check_scores(member_scores, nonmember_scores)
    delta = check_delta(delta)
    c = check_probability(confidence, "confidence", low_open=True, high_open=True)
    alpha = 1.0 - c
    split = isinstance(threshold, str)
    if split:
        check_choice(threshold, "threshold", ["split"])
    elif isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not math.isfinite(threshold):
        raise ConfigError(f"threshold={threshold!r} is not allowed: a finite score fixed "
                          "in advance, or 'split'")
    n_in = ins.size - ins.size // 2 if split else ins.size
    n_out = outs.size - outs.size // 2 if split else outs.size
    ceiling = _perfect_bound(n_in, n_out, delta, alpha)
    if ceiling <= 0.0:
        need = audit_samples_needed(0.0, delta=delta, confidence=c, split=split)
        raise DataError(f"{ins.size} member and {outs.size} non-member trials cannot certify "
                        f"any epsilon > 0 at confidence {c:g} with delta={delta:g}, even for a "
                        f"perfect attack; need at least {need} of each"
                        + (" (half of them select the threshold)" if split else ""))
    if split:
        rng = check_rng(rng)
        ins, outs = ins[rng.permutation(ins.size)], outs[rng.permutation(outs.size)]
        threshold = _best_threshold(ins[n_in:], outs[n_out:], delta, alpha)
        ins, outs = ins[:n_in], outs[:n_out]
    tpr_lo, fpr_hi = _rate_bounds(int(np.sum(ins >= threshold)), n_in,
                                  int(np.sum(outs >= threshold)), n_out, alpha)
    eps = float(_epsilon_from_rates(tpr_lo, fpr_hi, delta))
    return EpsilonBound(epsilon=max(eps, 0.0), confidence=c, delta=delta,
                        method="clopper-pearson" + ("/split" if split else "/fixed-threshold"),
                        threshold=float(threshold), tpr_lower=float(tpr_lo),
                        fpr_upper=float(fpr_hi), n_members=n_in, n_nonmembers=n_out,
                        max_certifiable=ceiling)
