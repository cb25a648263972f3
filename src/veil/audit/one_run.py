"""Privacy auditing with one training run (Steinke, Nasr & Jagielski 2023).

m canaries are each included in the training data independently with probability 1/2
(S_i in {-1, +1}). After one training run the auditor scores every canary and guesses
"included" for the k+ highest scores and "excluded" for the k- lowest, abstaining on the
rest: r = k+ + k- guesses, of which v are correct. Their main theorem and its extension to
delta > 0 (the p-value their appendix computes) bound the chance of v or more correct
guesses under (epsilon, delta)-DP: with q = e^eps / (1 + e^eps),

    P[W >= v] <= P[Binomial(r, q) >= v]
                 + 2 m delta * max_{i=1..v} P[v > Binomial(r, q) >= v - i] / i

(for delta = 0 the first term alone: correct guesses are stochastically dominated by
Binomial(r, q), the accuracy of eps-DP randomized response). The audit reports the largest
eps whose p-value is still below alpha = 1 - confidence: with probability >= confidence the
true epsilon is at least that.

k+ and k- must be fixed before the scores are seen. ``guesses="search"`` tries a fixed grid
of (k+, k-) and pays for it with a Bonferroni correction (each candidate tested at
alpha / number of candidates), so the reported bound keeps its confidence.

The bound can never exceed what perfect guesses would certify; for delta > 0 the term
2 m delta caps it (more canaries raise the cap only while 2 m delta stays small).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import bdtrc, gammaln

from veil._validation import check_array, check_delta, check_int, check_probability
from veil.errors import ConfigError, DataError
from veil.random import check_rng

#: fractions f of m tried by ``guesses="search"``: (k+, k-) in {(k, 0), (0, k), (k, k)}, k = f m
SEARCH_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
_EPS_MAX = 60.0


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P[>= v correct of r guesses] under (epsilon, delta)-DP with m canaries (Steinke et
    al. 2023; see the module docstring)."""
    if not 0 <= v <= r <= m:
        raise ConfigError(f"m={m}, r={r}, v={v} are not allowed: need 0 <= v <= r <= m")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = 1.0 if v == 0 else float(bdtrc(v - 1, r, q))  # P[Binomial(r, q) >= v]
    if delta == 0.0 or v == 0:
        return min(tail, 1.0)
    # S_i = P[v > Binomial >= v - i] = sum_{j=v-i}^{v-1} pmf(j), i = 1..v
    j = np.arange(v - 1, -1, -1)
    log_q = -math.log1p(math.exp(-epsilon))  # log q and log(1 - q), stable for large eps
    log_not_q = log_q - epsilon
    log_pmf = (gammaln(r + 1) - gammaln(j + 1) - gammaln(r - j + 1) + j * log_q
               + (r - j) * log_not_q)
    slack = float(np.max(np.cumsum(np.exp(log_pmf)) / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * delta * slack, 1.0)


def _epsilon_for(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest epsilon whose p-value is <= alpha (0 when epsilon = 0 is not rejected).
    The p-value increases with epsilon, so its crossing of alpha is found by bracketing and
    Brent's method (to 1e-7)."""
    if r == 0 or one_run_p_value(m, r, v, 0.0, delta) > alpha:
        return 0.0
    hi = 1.0
    while one_run_p_value(m, r, v, hi, delta) <= alpha:
        if hi >= _EPS_MAX:
            return _EPS_MAX
        hi *= 2.0
    root = brentq(lambda e: one_run_p_value(m, r, v, e, delta) - alpha, 0.0, hi, xtol=1e-7)
    return max(0.0, float(root) - 1e-7)  # the root is within xtol: stay on the safe side


def _candidates(m: int, guesses) -> list[tuple[int, int]]:
    if guesses == "search":
        pos = sorted({max(1, int(f * m)) for f in SEARCH_FRACTIONS})
        return sorted({g for k in pos for g in ((k, 0), (0, k), (k, k)) if sum(g) <= m})
    try:
        k_pos, k_neg = guesses
    except (TypeError, ValueError):
        raise ConfigError(f"guesses={guesses!r} is not allowed: 'search' or a pair "
                          "(k_pos, k_neg)") from None
    k_pos = check_int(k_pos, "guesses[0] (k_pos)", low=0, high=m)
    k_neg = check_int(k_neg, "guesses[1] (k_neg)", low=0, high=m - k_pos)
    if k_pos + k_neg == 0:
        raise ConfigError("guesses=(0, 0) is not allowed: make at least one guess")
    return [(k_pos, k_neg)]


@dataclass(frozen=True)
class OneRunBound:
    """epsilon >= ``epsilon`` with probability ``confidence``, from ``correct`` of ``guesses``
    guesses on ``canaries`` canaries (top ``k_pos`` guessed in, bottom ``k_neg`` out)."""

    epsilon: float
    confidence: float
    delta: float
    canaries: int
    guesses: int
    correct: int
    k_pos: int
    k_neg: int
    candidates: int
    max_certifiable: float
    method: str = "one-run (Steinke, Nasr & Jagielski 2023)"

    def to_dict(self) -> dict:
        return asdict(self)


def _max_certifiable(m: int, cands, delta: float, alpha: float) -> float:
    return max(_epsilon_for(m, kp + kn, kp + kn, delta, alpha) for kp, kn in cands)


def canaries_needed(*, delta: float = 0.0, confidence: float = 0.95,
                    guesses="search") -> int:
    """Fewest canaries for which perfect guesses certify some epsilon > 0."""
    d = check_delta(delta)
    alpha = 1.0 - check_probability(confidence, "confidence", low_open=True, high_open=True)
    m = 1
    while m < 10 ** 8:
        cands = _candidates(m, guesses) if guesses == "search" else _candidates(m, (m, 0))
        if _max_certifiable(m, cands, d, alpha / len(cands)) > 0.0:
            return m
        m = m + 1 if m < 64 else int(m * 1.25)
    raise DataError(f"no number of canaries certifies epsilon > 0 with delta={delta:g}: "
                    "lower delta")


def one_run_epsilon_lower_bound(scores, included, *, delta: float = 0.0,
                                confidence: float = 0.95, guesses="search",
                                rng=None) -> OneRunBound:
    """Lower-bound epsilon from one training run with canaries.

    ``scores``: one attack score per canary (higher = "included"); ``included``: whether each
    canary was in the training data (drawn independently with probability 1/2 before
    training). ``guesses``: ``(k_pos, k_neg)`` fixed in advance, or ``"search"`` (a fixed grid
    with a Bonferroni correction). Tied scores are ranked in random order (``rng``): the
    guesses must depend on the scores only, never on the order the canaries are listed in.
    """
    s = check_array(scores, "scores", ndim=1)
    inc = np.asarray(included)
    if inc.shape != s.shape:
        raise DataError(f"included has shape {inc.shape} and scores {s.shape}; need one "
                        "inclusion flag per canary score")
    if inc.dtype != bool and not np.isin(inc, (0, 1)).all():
        raise DataError("included must hold booleans (or 0/1): whether each canary was "
                        "in the training data")
    inc = inc.astype(bool)
    d = check_delta(delta)
    c = check_probability(confidence, "confidence", low_open=True, high_open=True)
    m = s.size
    cands = _candidates(m, guesses)
    alpha = (1.0 - c) / len(cands)
    ceiling = _max_certifiable(m, cands, d, alpha)
    if ceiling <= 0.0:
        need = canaries_needed(delta=d, confidence=c, guesses=guesses)
        raise DataError(f"{m} canaries cannot certify any epsilon > 0 at confidence {c:g} "
                        f"with delta={d:g}, even with every guess right; need at least {need}")
    ranked = inc[np.lexsort((check_rng(rng).random(m), -s))]  # by score, ties at random
    best = None
    for kp, kn in cands:
        v = int(ranked[:kp].sum()) + int((~ranked[m - kn:]).sum() if kn else 0)
        eps = _epsilon_for(m, kp + kn, v, d, alpha)
        if best is None or eps > best[0]:
            best = (eps, kp, kn, v)
    eps, kp, kn, v = best
    return OneRunBound(epsilon=eps, confidence=c, delta=d, canaries=m, guesses=kp + kn,
                       correct=v, k_pos=kp, k_neg=kn, candidates=len(cands),
                       max_certifiable=ceiling)
