"""Start-up: CPU seconds to import veil's federated entry points beside ``import flwr``.

Flower starts a fresh ClientApp process for every message a node handles, and that process
imports ``veil.experiments.flower_app`` (issue 30). Each figure is the CPU time (user + system,
as ``/usr/bin/time -f %U+%S`` reports it) of a fresh interpreter that runs ``import MODULE``,
the median of ``--repeats`` runs; "after flwr" is ``import flwr; import MODULE`` less
``import flwr``: what veil adds in a process where Flower is already loaded.

    python benchmarks/bench_startup.py --repeats 7 [--src DIR]

``--src`` puts another source tree first on the path (e.g. the main checkout's, for the
figures before a change), so both are measured on the same machine in one session.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

MODULES = ["veil.fl", "veil.fl.federation", "veil.fl.runtime.flower",
           "veil.experiments.flower_app", "veil.dp", "veil.dp.ledger"]


def cpu_seconds(code: str, src: str, repeats: int) -> float:
    """Median CPU seconds (user + system) of ``python -c code``, over ``repeats`` runs."""
    env = {**os.environ, "PYTHONPATH": src}
    times = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", "src"))
    args = parser.parse_args()
    src = os.path.abspath(args.src)
    bare = cpu_seconds("pass", src, args.repeats)
    flwr = cpu_seconds("import flwr", src, args.repeats)
    print(f"source: {src}; load average {os.getloadavg()[0]:.1f}; "
          f"median of {args.repeats}; bare interpreter {bare:.2f} CPU-s")
    print("| import | CPU-s | / import flwr | after flwr (CPU-s) |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| flwr | {flwr:.2f} | 1.00 | |")
    for module in MODULES:
        alone = cpu_seconds(f"import {module}", src, args.repeats)
        after = cpu_seconds(f"import flwr, {module}", src, args.repeats) - flwr
        print(f"| {module} | {alone:.2f} | {alone / flwr:.2f} | {after:+.2f} |")


if __name__ == "__main__":
    main()
