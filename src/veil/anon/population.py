"""Population estimates from a sample's equivalence-class sizes.

A released table is a sample of n records from a population of N people (sampling
fraction ``pi = n / N``). From the sample's class-size histogram (``c_i`` classes of size
i, u classes in all) these estimators give:

* **k-map's derived k** (El Emam & Dankar, JAMIA 2008): the population size F of a class
  of sample size f is modelled as ``F - f ~ Poisson(lambda)`` (or F ~ Poisson truncated at
  zero) with ``lambda = pi k``; :func:`kmap_k` is the smallest class size whose
  population count reaches k with probability at least ``1 - significance``, as ARX
  computes it (capped at k).
* **population uniques**, the number of population classes of size one:

  - Zayatz (1991): ``c_1 / pi * P(1 | 1) / sum_i (c_i / u) P(1 | i)`` with ``P(1 | i)``
    the hypergeometric probability that a population class of size i leaves exactly one
    record in a sample of n out of N;
  - Pitman (1996; Hoshino 2001): the sample is an exchangeable partition with parameters
    (theta, alpha), fitted by maximum likelihood (Newton's method on the score equations
    ``sum_{i<u} 1/(theta + i alpha) = sum_{i<n} 1/(theta + i)`` and
    ``sum_{i<u} i/(theta + i alpha) = sum_{j>=2} c_j sum_{l<j} 1/(l - alpha)``, from the
    moment estimates); uniques ``Gamma(theta + 1) / Gamma(theta + alpha) N^alpha``;
  - SNB, the slide negative binomial (Chen & Keller-McNulty 1998): K non-empty
    population classes estimated from the histogram, (alpha, beta) solved from the
    expected numbers of sample classes of sizes one and two (:func:`_snb_system`) by
    Newton's method run as ARX's solver runs it (:func:`_newton`: from (1, 1), then
    ARX's 16 start values); uniques ``K beta^alpha``. The Jacobian is the exact one:
    the second row of ARX's hand-derived Jacobian is not the derivative of the second
    equation, and with it ARX's solver (newtonraphson 0.0.1, ARX's formulas, run in
    Java) reaches no root on any of 4,251 Adult class-size histograms tried (its SNB
    estimate is "no solution" for each); the same solver with a correct Jacobian
    reaches the 13 roots veil finds there, to the last digits;
  - Dankar et al. (BMC Med Inform 2012): Pitman for ``pi <= 0.1``, else the smaller of
    Zayatz and SNB (Zayatz when SNB has no solution).

An estimate that has no solution (NaN, outside [0, N]) is 0, as in ARX; a sample
without classes of size one has no population uniques.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from veil._validation import check_choice
from veil.errors import ConfigError

__all__ = ["POPULATION_MODELS", "kmap_k", "population_uniques"]

POPULATION_MODELS = ("dankar", "pitman", "zayatz", "snb")
#: the start values ARX's deterministic solver tries after the first
_STARTS = [(a, b) for a in (0.0, 0.33, 0.66, 0.99) for b in (0.0, 0.33, 0.66, 0.99)]


def kmap_k(k: int, fraction: float, significance: float, estimator: str) -> int:
    """The sample class size k' that k-map requires (at most k)."""
    lam = fraction * k
    dist = stats.poisson(lam)
    if estimator == "poisson":
        m, value = 0, 0.0
        while value < 1 - significance:
            value = float(dist.cdf(m))
            m += 1
            if m >= k:
                break
        return m + 1
    m, value, mass = 1, 0.0, float(-math.expm1(-lam))
    while value < 1 - significance:
        value += float(dist.pmf(m)) / mass
        m += 1
        if m >= k:
            break
    return m


def _histogram(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The class sizes present and how many classes have each (counted, not sorted)."""
    per_size = np.bincount(np.asarray(sizes, dtype=np.int64))
    size = np.flatnonzero(per_size)
    return size, per_size[size].astype(np.float64)


def _valid(x: float, population: float) -> float:
    return x if math.isfinite(x) and 0 < x <= population else 0.0


def _log_choose(a, b):
    return special.gammaln(a + 1) - special.gammaln(b + 1) - special.gammaln(a - b + 1)


def _one_drawn(size: np.ndarray, n: float, population: float) -> np.ndarray:
    """Hypergeometric ``P(1 | i) = i C(N - i, n - 1) / C(N, n)``."""
    i = size.astype(np.float64)
    return np.exp(np.log(i) + _log_choose(population - i, n - 1)
                  - _log_choose(population, n))


def _zayatz(size, count, n, population) -> float:
    u = count.sum()
    c1 = count[size == 1].sum()
    p1 = _one_drawn(size, n, population)
    single = _one_drawn(np.ones(1), n, population)[0]
    return float(c1 * (c1 / u * single) / np.sum(count / u * p1) / (n / population))


def _newton(equations, start: tuple[float, float], *, per_try: int = 15,
            accuracy: float = 1e-6, total: int = 10_000,
            admissible=lambda x: True) -> np.ndarray:
    """ARX's two-dimensional Newton-Raphson solver (deterministic variant), whose choice
    of root decides which transformations pass: from ``start``, then from each of
    :data:`_STARTS`, at most ``per_try + 1`` steps ``x <- x - J(x)^-1 F(x)`` per try, a
    try abandoned when x leaves the admissible region or is NaN, success when
    ``|F_1|, |F_2| <= accuracy``; NaN when the last start is reached. ``equations(x)``
    returns F(x) and its Jacobian J(x)."""
    x = np.array(start, dtype=np.float64)
    tried, steps = 0, 0
    while steps <= total:
        taken = 0
        while True:
            steps += 1
            f, jac = equations(x)
            if abs(f[0]) <= accuracy and abs(f[1]) <= accuracy:
                return x
            det = jac[0, 0] * jac[1, 1] - jac[0, 1] * jac[1, 0]
            inv = np.array([[jac[1, 1], -jac[0, 1]], [-jac[1, 0], jac[0, 0]]]) / det
            x = x - inv @ f
            if tried == len(_STARTS):
                return np.full(2, np.nan)
            if not admissible(x) or np.isnan(x).any() or taken >= per_try:
                break
            taken += 1
        x = np.array(_STARTS[tried], dtype=np.float64)
        tried += 1
    return np.full(2, np.nan)


def _pitman(size, count, n, population) -> float:
    u = float(count.sum())
    c1 = float(count[size == 1].sum())
    c2 = float(count[size == 2].sum()) or 1.0
    c = c1 * (c1 - 1) / c2
    theta = (n * u * c - c1 * (n - 1) * (2 * u + c)) / (2 * c1 * u + c1 * c - n * c)
    alpha = (theta * (c1 - n) + (n - 1) * c1) / (n * u)
    big = size[size != 1].astype(np.float64)
    big_count = count[size != 1]
    i_u = np.arange(1, u)
    i_n = np.arange(1, n)
    # sum_j c_j sum_{l<j} g(l) = sum_l w_l g(l), w_l the classes of size above l
    ell = np.arange(1, big.max()) if big.size else np.zeros(0)
    above = np.r_[np.cumsum(big_count[::-1])[::-1], 0.0]     # integers: exact sums
    w = above[np.searchsorted(big, ell, side="right")]
    args = np.empty(5 + big.size)

    def closed(x):
        """The score equations with digamma sums, and their Jacobian. Every digamma comes
        from one call; the trigamma differences are sums by the recurrence
        ``psi'(x) - psi'(x + 1) = 1 / x^2``: ``psi'(1 + r) - psi'(u + r) = sum_{i<u} 1 /
        (r + i)^2`` and ``sum_j c_j (psi'(1 - a) - psi'(j - a)) = sum_l w_l / (l - a)^2``
        (a few thousand terms at most, where ``zeta(2, .)`` of a large negative argument
        costs milliseconds); ``psi'(t + 1) - psi'(n + t)`` is ``zeta(2, .)``."""
        t, a = x
        r = t / a
        args[:5] = (u + r, 1 + r, n + t, t + 1, 1 - a)
        args[5:] = big - a
        psi, tri = special.digamma(args), special.zeta(2, args[2:4])
        g, g1 = psi[0] - psi[1], -np.sum(1 / (r + i_u) ** 2)
        f = np.array([g / a - (psi[2] - psi[3]),
                      (a * (u - 1) - t * g) / a ** 2
                      - np.sum(big_count * (psi[5:] - psi[4]))])
        cross = -(a * g + t * g1) / a ** 3
        jac = np.array([[g1 / a ** 2 + tri[1] - tri[0], cross],
                        [cross, -(u - 1) / a ** 2 + t * t * g1 / a ** 4 + 2 * t * g / a ** 3
                         - np.sum(w / (ell - a) ** 2)]])
        return f, jac

    def summed(x):
        """The same equations as explicit sums (for where the closed form fails); where
        every digamma argument is positive the two agree, and the closed form is used."""
        t, a = x
        if t >= 0 and a > 0:
            return closed(x)
        d = t + i_u * a
        f = np.array([np.sum(1 / d) - np.sum(1 / (t + i_n)),
                      np.sum(i_u / d) - np.sum(w / (ell - a))])
        cross = -np.sum(i_u / d ** 2)
        jac = np.array([[np.sum(1 / (t + i_n) ** 2) - np.sum(1 / d ** 2), cross],
                        [cross, -np.sum(i_u ** 2 / d ** 2) - np.sum(w / (ell - a) ** 2)]])
        return f, jac

    with np.errstate(all="ignore"):
        start = (theta, alpha)
        sol = _newton(closed, start, admissible=lambda x: x[0] >= 0)
        if np.isnan(sol).any() or np.any(np.abs(summed(sol)[0]) > 1e-6):
            sol = _newton(summed, start, admissible=lambda x: x[0] >= 0)
        t, a = sol
        if np.isnan(sol).any() or a == 0:
            return 0.0
        log_value = special.gammaln(t + 1) - special.gammaln(t + a) + a * math.log(population)
    if not math.isfinite(log_value) or log_value > math.log(population):
        return 0.0
    return _valid(math.exp(log_value), population)


def _snb_system(size, count, n, population):
    """SNB's K and its two equations in (alpha, beta) with their Jacobian (module
    docstring): ``E[c_1] = K f (beta / q)^alpha (alpha d / q + 1)`` and ``E[c_2] = K alpha
    beta^alpha f^2 (1 - beta) q^(alpha + 2) (2 - (1 - alpha) d) / 2``, ``d = (1 - f) (1 -
    beta)``, ``q = 1 - d``. K is ARX's estimate, including its ``- 1`` per histogram entry
    in the second sum."""
    f = n / population
    c1 = float(count[size == 1].sum())
    c2 = float(count[size == 2].sum())
    s = size.astype(np.float64)
    base = (1 - f) ** s * count
    v1 = np.sum(s * f * f * (1 - f * f) ** (s - 1) * count)
    v2 = np.sum(base * (1 + f) ** s - 1)
    v4 = np.sum(s * f * (1 - f) ** (s - 1) * count)
    k = float(count.sum()) + c1 * (v1 / v2) * (base.sum() / v4) ** 2
    half = k * f * f / 2

    def equations(x):
        a, b = x                                   # numpy scalars: NaN, never complex
        d = (1 - f) * (1 - b)
        q = 1 - d
        e = 2 - (1 - a) * d
        ratio = (b / q) ** a
        h = a * d / q + 1
        tail = b ** a * q ** (a + 2) * e           # E[c_2] = half a (1 - b) tail
        d_tail = tail * (a / b + (a + 2) * (1 - f) / q + (1 - a) * (1 - f) / e)
        f_vec = np.array([k * f * ratio * h - c1, half * a * (1 - b) * tail - c2])
        jac = np.array([
            [k * f * ratio * (np.log(b / q) * h + d / q),
             k * f * ratio * a * ((1 / b - (1 - f) / q) * h - (1 - f) / q ** 2)],
            [half * (1 - b) * tail * (1 + a * (np.log(b) + np.log(q) + d / e)),
             half * a * ((1 - b) * d_tail - tail)]])
        return f_vec, jac

    return k, equations


def _snb_solution(size, count, n, population) -> tuple[float, float, float]:
    """``(K, alpha, beta)``: the root ARX's solver (:func:`_newton`) reaches from (1, 1),
    then from :data:`_STARTS`; alpha and beta NaN when it reaches none."""
    k, equations = _snb_system(size, count, n, population)
    with np.errstate(all="ignore"):
        a, b = _newton(equations, (1.0, 1.0))
    return k, float(a), float(b)


def _snb(size, count, n, population) -> float:
    k, a, b = _snb_solution(size, count, n, population)
    with np.errstate(all="ignore"):
        return _valid(float(k * np.float64(b) ** a), population)


def population_uniques(sizes: np.ndarray, population_size: float, model: str = "dankar") -> float:
    """Estimated number of population uniques, from a sample's class sizes."""
    check_choice(model, "model", POPULATION_MODELS)
    size, count = _histogram(sizes)
    n = float((size * count).sum())
    if population_size < n:
        raise ConfigError(f"population_size={population_size!r} is not allowed: the sample "
                          f"holds {int(n)} records, more than the population")
    if not (size == 1).any():
        return 0.0
    args = (size, count, n, float(population_size))
    if model == "zayatz":
        return _valid(_zayatz(*args), population_size)
    if model == "pitman":
        return _pitman(*args)
    if model == "snb":
        return _snb(*args)
    if n / population_size <= 0.1:
        return _pitman(*args)
    zayatz, snb = _valid(_zayatz(*args), population_size), _snb(*args)
    return min(zayatz, snb) if snb else zayatz
