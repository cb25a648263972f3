"""Vertical federated learning end to end: a TOML [vertical] section -> PSI alignment ->
training -> metrics, printed beside centralized scikit-learn on the same aligned rows.

Run:  .venv/bin/python examples/vertical_fl.py [examples/fl_vertical_breast.toml]
      [--protocol paillier|ss] [--key-bits 2048]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

from veil.experiments.vertical_run import run_vertical


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(here / "fl_vertical_breast.toml"))
    parser.add_argument("--protocol", choices=("paillier", "ss"))
    parser.add_argument("--key-bits", type=int)
    args = parser.parse_args(argv)
    path = Path(args.config)
    section = tomllib.loads(path.read_text())["vertical"]
    if args.protocol:
        section["protocol"] = args.protocol
    if args.key_bits:
        section["key_bits"] = args.key_bits
    start = time.perf_counter()
    results = run_vertical(section, base=path.resolve().parent)
    results["seconds"] = round(time.perf_counter() - start, 2)
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
