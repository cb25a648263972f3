"""Bytes and seconds per round: veil's local runtime against veil on Flower's simulation
engine and on a Flower deployment on loopback (issue 15), for FedAvg and SecAgg+ on the same
parties, seeds and model (one TOML file per run, as `veil fl run` reads).

All runtimes move the same veil messages (local and simulation give the same model: checked
here); Flower adds its envelope around each (a ConfigRecord holding the bytes), counted from
Flower's own serializer, and its delivery latency. "s/round" is the mean wall time of the
rounds after the first (round 1 under simulation also warms the Ray actors); "start" is
the time before the first round (Ray, or SuperLink + SuperNodes + `flwr run`).

    .venv/bin/python benchmarks/bench_flower.py [--parties 10] [--rounds 3] [--deploy]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
from flwr.common.serde import recorddict_to_proto

from veil.experiments.flower_app import Loopback, _federation, write_app
from veil.fl import LocalRuntime
from veil.fl.runtime.flower import _record, simulate

CONFIG = """
[data]
dataset = "digits"
partition = "iid"
clients = {parties}

[model]
type = "softmax_regression"

[training]
rounds = {rounds}
learning_rate = 0.3
batch_size = 32
{secagg}
[run]
seed = 1
timeout = 300
"""
SECAGG = "\n[secagg]\nbits = 32\nclip_range = 2.0\nneighbours = 4\n"


class _Counting(LocalRuntime):
    """The local runtime, keeping the number of veil messages of each round."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[int] = []

    def run_round(self, server, clients, rng=None):
        report = super().run_round(server, clients, rng)
        self.messages.append(len(report.messages))
        return report


def _envelope(nbytes: int) -> int:
    """Bytes Flower's RecordDict adds around a veil message of ``nbytes`` (with a seed)."""
    content = _record(message=b"\0" * nbytes, seed=b"\0" * 32)
    return recorddict_to_proto(content).ByteSize() - nbytes


def _deployed(config: Path, parties: int, work: Path) -> tuple[list[dict], float]:
    app = write_app(config, work / "app", results=work / "results")
    began = time.perf_counter()
    with Loopback(work / "deployment", parties) as deployment:
        deployment.run(app, timeout=900)
    total = time.perf_counter() - began
    return json.loads((work / "results" / "results.json").read_text())["rounds"], total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parties", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deploy", action="store_true",
                        help="also run each strategy on a loopback deployment (slow)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    envelope = _envelope(1000)
    print(f"{args.parties} parties, digits (64 features, 10 classes, 650 parameters), "
          f"{args.rounds} rounds; Flower envelope per message: {envelope} bytes")
    print(f"{'strategy':8} {'runtime':11} {'bytes/round':>12} {'+flower env':>12} "
          f"{'s/round':>9} {'start s':>8} {'total s':>8} {'s/round / local':>16}")
    work = Path(tempfile.mkdtemp(prefix="veil-bench-flower-"))
    for name, secagg in (("FedAvg", ""), ("SecAgg+", SECAGG)):
        config = work / f"{name.lower().rstrip('+')}.toml"
        config.write_text(CONFIG.format(parties=args.parties, rounds=args.rounds,
                                        secagg=secagg))
        counting = _Counting()
        _, fed = _federation(config)
        fed.runtime = counting
        began = time.perf_counter()
        local = fed.run()
        runs = {"local": (local.rounds, time.perf_counter() - began)}
        _, fed = _federation(config)
        began = time.perf_counter()
        flower = simulate(fed, timeout=300.0)
        runs["flower-sim"] = (flower.rounds, time.perf_counter() - began)
        assert np.array_equal(local.params, flower.params), "the runtimes disagree"
        if args.deploy:
            runs["deployed"] = _deployed(config, args.parties, work / name)
        messages = float(np.mean(counting.messages))  # the same messages under Flower
        base = np.mean([r["time"] for r in local.rounds[1:] or local.rounds])
        for runtime, (rounds, total) in runs.items():
            veil_bytes = np.mean([r["bytes_up"] + r["bytes_down"] for r in rounds])
            extra = 0 if runtime == "local" else messages * envelope
            seconds = np.mean([r["time"] for r in rounds[1:] or rounds])
            start = total - sum(r["time"] for r in rounds)
            print(f"{name:8} {runtime:11} {veil_bytes:12.0f} {veil_bytes + extra:12.0f} "
                  f"{seconds:9.3f} {start:8.1f} {total:8.1f} {seconds / base:16.1f}")


if __name__ == "__main__":
    main()
