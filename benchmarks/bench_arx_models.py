"""ARX's other privacy models (issue 34): each ARX JUnit case on Adult against veil's
k-anonymity search on the same lattice.

For every case reproduced in tests/anon/test_arx_models.py (ARX's transformation and metric
value, asserted here too), the optimal search runs with the case's model, and again with
KAnonymity(5) in its place (same quasi-identifiers, suppression limit and metric): the
table gives both times (wall and CPU, best of ``--repeat``), nodes checked and the ratio.

    python benchmarks/bench_arx_models.py --repeat 3            # all cases (minutes)
    python benchmarks/bench_arx_models.py --only BLikeness KMap  # a selection
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "anon"))

from test_arx_models import ADULT, CASES  # noqa: E402

from veil.anon import Hierarchy, KAnonymity, anonymize  # noqa: E402
from veil.datasets import load_adult, load_adult_hierarchies  # noqa: E402


def _timed(df, qis, sensitive, model, limit, metric, repeat):
    best = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = anonymize(df, qis, sensitive, [model], suppression_limit=limit, metric=metric)
        timing = (time.perf_counter() - wall, time.process_time() - cpu)
        best = timing if best is None or timing[1] < best[1] else best
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, help="case name prefixes")
    args = parser.parse_args()
    frames = load_adult_hierarchies()
    df = load_adult("arx")
    hierarchies = {c: Hierarchy(frames[c], name=c) for c in ADULT}
    print("| ARX case | model | limit | metric | checked | wall s | CPU s | "
          "k=5: checked | wall s | CPU s | CPU ratio |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in CASES:
        name = case.id
        if args.only and not any(name.startswith(p) for p in args.only):
            continue
        sensitive, factory, limit, metric, loss, levels = case.values
        qis = {c: h for c, h in hierarchies.items() if c != sensitive}
        model = factory()
        result, (wall, cpu) = _timed(df, qis, sensitive, model, limit, metric, args.repeat)
        assert list(result.levels.values()) == levels, (name, result.levels)
        assert abs(result.metrics[metric] - loss) <= 1e-6 * abs(loss), name
        base, (bwall, bcpu) = _timed(df, qis, sensitive, KAnonymity(5), limit, metric,
                                     args.repeat)
        print(f"| {name} | {model} | {limit:g} | {metric} | {result.search['checked']} | "
              f"{wall:.2f} | {cpu:.2f} | {base.search['checked']} | {bwall:.2f} | "
              f"{bcpu:.2f} | {cpu / bcpu:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
