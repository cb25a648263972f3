"""Bytes and seconds per round: veil's local runtime against veil on Flower's simulation
engine (issue 15), for FedAvg and SecAgg+ on the same parties, seeds and model.

Both runtimes move the same veil messages (the same model comes out: checked here); Flower
adds its envelope around each (a ConfigRecord holding the bytes), counted below from
Flower's own serializer, and its delivery latency. Seconds per round are the mean wall
time of rounds 2..R (round 1 under Flower also warms the Ray actors); "start" is the time
Flower's engine takes to start before the first round (Ray).

    .venv/bin/python benchmarks/bench_flower.py [--parties 10] [--rounds 4]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
from flwr.common.serde import recorddict_to_proto
from sklearn.datasets import load_digits

from veil.fl import Federation, LocalRuntime
from veil.fl.runtime.flower import _record, simulate
from veil.fl.strategies import FedAvg, SecAgg
from veil.learn import SoftmaxRegression


def _parties(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    return [(X[i::n], y[i::n]) for i in range(n)]


def _envelope(nbytes: int) -> int:
    """Bytes Flower's RecordDict adds around a veil message of ``nbytes`` (with a seed)."""
    content = _record(message=b"\0" * nbytes, seed=b"\0" * 32)
    return recorddict_to_proto(content).ByteSize() - nbytes


class _Counting(LocalRuntime):
    """The local runtime, keeping the number of veil messages of each round."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[int] = []

    def run_round(self, server, clients, rng=None):
        report = super().run_round(server, clients, rng)
        self.messages.append(len(report.messages))
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parties", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    data = _parties(args.parties)
    strategies = {
        "FedAvg": lambda: FedAvg(),
        "SecAgg+ (FedAvg, k=4)": lambda: SecAgg(FedAvg(weighted=False), neighbours=4),
    }
    envelope = _envelope(1000)
    print(f"{args.parties} parties, digits (64 features, 10 classes, 650 parameters), "
          f"{args.rounds} rounds; Flower envelope per message: {envelope} bytes")
    print(f"{'strategy':24} {'runtime':11} {'bytes/round':>12} {'+flower env':>12} "
          f"{'s/round':>9} {'start s':>8} {'total s':>8} {'x local s/round':>16}")
    for name, make in strategies.items():
        began = time.perf_counter()
        counting = _Counting()
        local = Federation(data, SoftmaxRegression(), make(), args.rounds, rng=1,
                           runtime=counting).run()
        local_total = time.perf_counter() - began
        fed = Federation(data, SoftmaxRegression(), make(), args.rounds, rng=1)
        began = time.perf_counter()
        flower = simulate(fed, timeout=300.0)
        flower_total = time.perf_counter() - began
        assert np.array_equal(local.params, flower.params), "the runtimes disagree"
        messages = float(np.mean(counting.messages))  # the same messages under Flower
        for runtime, history, total in (("local", local, local_total),
                                        ("flower-sim", flower, flower_total)):
            veil_bytes = np.mean([r["bytes_up"] + r["bytes_down"] for r in history.rounds])
            extra = messages * envelope if runtime == "flower-sim" else 0
            seconds = np.mean([r["time"] for r in history.rounds[1:] or history.rounds])
            base = np.mean([r["time"] for r in local.rounds[1:] or local.rounds])
            start = total - sum(r["time"] for r in history.rounds)
            print(f"{name:24} {runtime:11} {veil_bytes:12.0f} {veil_bytes + extra:12.0f} "
                  f"{seconds:9.3f} {start:8.1f} {total:8.1f} {seconds / base:16.1f}")


if __name__ == "__main__":
    main()
