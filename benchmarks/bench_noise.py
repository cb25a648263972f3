"""Secure, floating-point-safe noise: samples per second, veil vs OpenDP and diffprivlib.

Laplace (epsilon = 1, sensitivity 1) and Gaussian (epsilon = 1, delta = 1e-5, sensitivity 1,
analytic sigma) noise added to a vector of zeros, in one process:

* veil: ``Laplace`` / ``Gaussian`` mechanisms (exact grid releases on the AES-CTR CSPRNG,
  vectorised; the per-release ledger charge is not per sample and is left out);
* OpenDP ``make_laplace`` / ``make_gaussian`` on float vectors (floating-point safe,
  secure: exact samplers with arbitrary-precision arithmetic), contrib features enabled;
* diffprivlib ``Snapping`` (Mironov's fp-safe Laplace) and ``GaussianDiscrete`` (integer
  noise, exact), plus its plain ``Laplace`` / ``GaussianAnalytic`` (neither fp-safe):
  one value per call, as its API works;
* numpy ``default_rng`` (PCG64, neither secure nor fp-safe): the ceiling.

Each rate is the best batch rate over ``--rounds`` rounds of at least ``--seconds`` each,
ours and the peers' measured in turn within each round: the machine is shared, so the best
batch is the least disturbed one, and interleaving exposes every sampler to the same load.
Goal (issue 2): >= 10 million secure fp-safe samples per second on the project's 2-core
machine.

    python benchmarks/bench_noise.py [--seconds 0.5] [--rounds 3] [--batch 1000000]
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np

from veil.dp import Gaussian, Laplace
from veil.random import secure_rng

warnings.filterwarnings("ignore")

EPSILON, DELTA = 1.0, 1e-5


def rate(draw: Callable[[int], object], batch: int, seconds: float) -> float:
    """The best samples-per-second of ``draw(batch)`` over at least ``seconds`` of batches."""
    draw(min(batch, 1000))
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        draw(batch)
        best = max(best, batch / (time.perf_counter() - t0))
    return best


def per_call(randomise: Callable[[float], object], zero: float = 0.0
             ) -> Callable[[int], object]:
    def draw(n: int) -> None:
        for _ in range(n):
            randomise(zero)
    return draw


def opendp_vector(kind: str, scale: float) -> Callable[[int], object]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    if kind == "laplace":
        meas = dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=scale)
    else:
        meas = dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=scale)
    return lambda n: meas([0.0] * n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=1_000_000, help="vector size (veil, numpy)")
    args = parser.parse_args()
    import diffprivlib.mechanisms as dpl

    secure = secure_rng()
    lap, gau = Laplace(EPSILON, 0.0, 1.0), Gaussian(EPSILON, DELTA, 1.0)
    pcg = np.random.default_rng()
    s, b = args.seconds, args.batch
    rows = []
    for name, ours, peers in [
        ("Laplace", lambda n: lap._randomize(np.zeros(n), secure), [
            ("OpenDP make_laplace (fp-safe)", opendp_vector("laplace", lap.scale), 2000),
            ("diffprivlib Snapping (fp-safe)", per_call(dpl.Snapping(
                epsilon=EPSILON, sensitivity=1.0, lower=-1e6, upper=1e6).randomise), 5000),
            ("diffprivlib Laplace (not fp-safe)", per_call(dpl.Laplace(
                epsilon=EPSILON, sensitivity=1.0).randomise), 5000),
            ("numpy PCG64 (insecure, not fp-safe)", lambda n: pcg.laplace(0, lap.scale, n), b),
        ]),
        ("Gaussian", lambda n: gau._randomize(np.zeros(n), secure), [
            ("OpenDP make_gaussian (fp-safe)", opendp_vector("gaussian", gau.sigma), 2000),
            ("diffprivlib GaussianDiscrete (exact, integer)", per_call(dpl.GaussianDiscrete(
                epsilon=EPSILON, delta=DELTA, sensitivity=1).randomise, 0), 5000),
            ("diffprivlib GaussianAnalytic (not fp-safe)", per_call(dpl.GaussianAnalytic(
                epsilon=EPSILON, delta=DELTA, sensitivity=1.0).randomise), 5000),
            ("numpy PCG64 (insecure, not fp-safe)", lambda n: pcg.normal(0, gau.sigma, n), b),
        ]),
    ]:
        mine, theirs = 0.0, [0.0] * len(peers)
        for _ in range(args.rounds):
            mine = max(mine, rate(ours, b, s))
            theirs = [max(t, rate(draw, batch, s)) for t, (_, draw, batch) in zip(theirs, peers)]
        rows.extend((name, mine, peer, t) for (peer, _, _), t in zip(peers, theirs))
    print(f"{'noise':<9} {'veil (secure, fp-safe)':>24}  {'peer':<46} {'peer':>14} "
          f"{'veil/peer':>10}")
    for name, mine, peer, theirs in rows:
        ratio = mine / theirs
        shown = f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2f}x"
        print(f"{name:<9} {mine / 1e6:>19.1f} M/s  {peer:<46} {theirs:>12,.0f}/s "
              f"{shown:>10}")
    goal = min(r[1] for r in rows)
    print(f"\ngoal >= 10 M secure fp-safe samples/s: {'met' if goal >= 1e7 else 'NOT met'} "
          f"(slowest of ours: {goal / 1e6:.1f} M/s)")


if __name__ == "__main__":
    main()
