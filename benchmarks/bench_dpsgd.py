"""DP-SGD: veil against Opacus (hooks and ghost clipping) and non-private PyTorch, on CPU.

Throughput (samples/s) of one training step (sample, forward, backward, clip, noise,
update) for an MLP 64-128-10 on digits (batch 256) and a small CNN on synthetic 1x28x28
inputs, all contenders in this process with the same torch thread count and the same way
of gathering a batch (``index_select``); where the time of veil's step goes, phase by
phase, next to non-private PyTorch's; and test accuracy on digits at epsilon 1, 3, 8
(delta 1e-5) with the same hyperparameters for veil and Opacus (each calibrating its own
noise to the target with its own accountant: veil PLD, Opacus PRV). Steps are timed by
process CPU time (``--clock wall`` for wall-clock time), so that other processes on a shared
machine slow the figures less.

    python benchmarks/bench_dpsgd.py                  # ~2 minutes
    python benchmarks/bench_dpsgd.py --full           # longer timings, 5 accuracy seeds
    python benchmarks/bench_dpsgd.py --baseline DIR   # + another veil version (DIR/veil_old)
    python benchmarks/bench_dpsgd.py --ratios 15      # veil / non-private only, 15 rounds

``--ratios N`` times only non-private PyTorch and veil, alternating (private, non-private)
for N rounds of ``--seconds`` each, and reports per model the median, lowest and highest of
the N per-round ratios veil / non-private (a round's two runs see the same load) with the
load average before and after.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from veil.dp import PrivacyBudget
from veil.learn.dpsgd import make_private
from veil.random import Generator

warnings.filterwarnings("ignore")

#: the timer: process CPU time by default (robust to other processes on a shared machine),
#: wall-clock time with --clock wall
clock = time.process_time


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    X, y = load_digits(return_X_y=True)
    return torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)


def synthetic_images(n: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


# -- contenders: each returns step() -> number of samples processed ---------------------

def random_rows_step(model, opt, loss_fn, X, y, batch):
    """A step on ``batch`` random rows (non-private PyTorch and Opacus alike)."""
    def step() -> int:
        idx = torch.randint(0, len(X), (batch,))
        opt.zero_grad()
        loss_fn(model(X.index_select(0, idx)), y.index_select(0, idx)).backward()
        opt.step()
        return batch
    return step


def plain_step(build, X, y, batch):
    model = build()
    return random_rows_step(model, torch.optim.SGD(model.parameters(), lr=0.05),
                            nn.CrossEntropyLoss(), X, y, batch)


def veil_step(build, X, y, batch, private=make_private):
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt, loader = private(model, opt, (X, y), noise_multiplier=1.0, delta=1e-5,
                                 max_grad_norm=1.0, epochs=100_000, batch_size=batch)
    batches = (b for _ in range(100_000) for b in loader)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> int:
        xb, yb = next(batches)
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
        return len(xb)
    return step


def opacus_step(mode):
    def make(build, X, y, batch):
        from opacus import PrivacyEngine

        model = build()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y),
                                             batch_size=batch)
        loss_fn = nn.CrossEntropyLoss()
        out = PrivacyEngine(accountant="rdp").make_private(
            module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=False, grad_sample_mode=mode,
            criterion=loss_fn)
        if mode == "ghost":
            model, opt, loss_fn, _ = out
        else:
            model, opt, _ = out
        return random_rows_step(model, opt, loss_fn, X, y, batch)
    return make


CONTENDERS = {"pytorch (non-private)": plain_step, "veil": veil_step,
              "opacus hooks": opacus_step("hooks"), "opacus ghost": opacus_step("ghost")}


def add_baseline(folder: str) -> None:
    """Time another version of veil in the same run: ``folder`` holds a copy of its
    ``src/veil`` renamed ``veil_old`` (package and imports), e.g. main's."""
    import importlib
    import sys

    sys.path.insert(0, folder)
    old = importlib.import_module("veil_old.learn.dpsgd").make_private
    CONTENDERS["veil (baseline)"] = lambda build, X, y, batch: veil_step(build, X, y, batch, old)


def throughput(build, X, y, batch, seconds: float, rounds: int) -> dict[str, float]:
    steps = {name: make(build, X, y, batch) for name, make in CONTENDERS.items()}
    for step in steps.values():  # warm up
        for _ in range(5):
            step()
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):  # interleaved, so load on the machine hits all alike
        for name, step in steps.items():
            done, start = 0, clock()
            while clock() - start < seconds:
                done += step()
            rates[name].append(done / (clock() - start))
    return {name: statistics.median(r) for name, r in rates.items()}


PHASES = ("sample", "zero_grad", "forward", "backward", "clip", "noise", "update")


def phase_times(build, X, y, batch, steps: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median microseconds per step spent in each phase, for non-private PyTorch and veil.

    veil's ``optimizer.step()`` is split by timing, from the outside, the clipping (the
    engine's ``clip``) and the noise draw (its ``Rows.next``, which draws a block of several
    steps' noise every few steps: the figure is the mean per step); "update" is the rest of
    the step (adding the noise, the wrapped optimizer's update). Non-private "update" is
    ``optimizer.step()``.
    """
    loss_fn = nn.CrossEntropyLoss()
    plain_model = build()
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.05)

    def plain_batch():
        idx = torch.randint(0, len(X), (batch,))
        return X.index_select(0, idx), y.index_select(0, idx)

    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt, loader = make_private(model, opt, (X, y), noise_multiplier=1.0, delta=1e-5,
                                      max_grad_norm=1.0, epochs=100_000, batch_size=batch)
    batches = (b for _ in range(100_000) for b in loader)
    inner: dict[str, float] = {"clip": 0.0, "noise": 0.0}

    def timed(name, fn):
        def call(*args, **kwargs):
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                inner[name] += clock() - start
        return call

    opt.engine.clip = timed("clip", opt.engine.clip)
    opt._noise.next = timed("noise", opt._noise.next)
    runs = {"pytorch (non-private)": (plain_model, plain_opt, plain_batch, False),
            "veil": (model, opt, lambda: next(batches), True)}
    results: dict[str, dict[str, list[float]]] = {name: {} for name in runs}
    for _ in range(rounds):
        for name, (m, o, next_batch, private) in runs.items():
            total = dict.fromkeys(("sample", "zero_grad", "forward", "backward", "step"), 0.0)
            inner["clip"] = inner["noise"] = 0.0
            for i in range(steps + 10):
                if i == 10:  # warm-up done
                    total = dict.fromkeys(total, 0.0)
                    inner["clip"] = inner["noise"] = 0.0
                t0 = clock()
                xb, yb = next_batch()
                t1 = clock()
                o.zero_grad()
                t2 = clock()
                loss = loss_fn(m(xb), yb)
                t3 = clock()
                loss.backward()
                t4 = clock()
                o.step()
                t5 = clock()
                for key, a, b in (("sample", t0, t1), ("zero_grad", t1, t2), ("forward", t2, t3),
                                  ("backward", t3, t4), ("step", t4, t5)):
                    total[key] += b - a
            clip, noise = (inner["clip"], inner["noise"]) if private else (0.0, 0.0)
            total["clip"], total["noise"] = clip, noise
            total["update"] = total.pop("step") - clip - noise
            for key, value in total.items():
                results[name].setdefault(key, []).append(value / steps * 1e6)
    return {name: {k: statistics.median(v) for k, v in phases.items()}
            for name, phases in results.items()}


# -- accuracy --------------------------------------------------------------------------

def train_veil(Xtr, ytr, epsilon, epochs, lr, q, seed):
    torch.manual_seed(seed)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model, opt, loader = make_private(model, opt, (Xtr, ytr),
                                      budget=PrivacyBudget(epsilon, 1e-5), max_grad_norm=1.0,
                                      epochs=epochs, sample_rate=q,
                                      rng=Generator(seed))
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
    return model, opt.plan.noise_multiplier


def train_opacus(Xtr, ytr, epsilon, epochs, lr, batch, seed):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(Xtr, ytr),
                                         batch_size=batch)
    engine = PrivacyEngine()
    model, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=opt, data_loader=loader, target_epsilon=epsilon,
        target_delta=1e-5, epochs=epochs, max_grad_norm=1.0)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
    return model, opt.noise_multiplier


def accuracy(model, X, y) -> float:
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (all alike)")
    parser.add_argument("--seconds", type=float, default=1.5, help="per contender per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30, help="accuracy runs")
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=2, help="accuracy seeds")
    parser.add_argument("--full", action="store_true", help="--seconds 4 --rounds 5 --seeds 5")
    parser.add_argument("--only", choices=("throughput", "accuracy"), help="run one part")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="time the steps by process CPU time (default) or wall-clock time")
    parser.add_argument("--ratios", type=int, metavar="N",
                        help="only veil / non-private, N interleaved rounds (per-round ratios)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also time the veil_old package in DIR (a renamed copy of another "
                             "version's src/veil) as 'veil (baseline)'")
    args = parser.parse_args()
    if args.baseline:
        add_baseline(args.baseline)
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.full:
        args.seconds, args.rounds, args.seeds = 4.0, 5, 5
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.clock} time\n")

    X, y = digits()
    if args.ratios:
        compare_ratios(args, X, y)
        return
    if args.only != "accuracy":
        compare_throughput(args, X, y)
    if args.only != "throughput":
        compare_accuracy(args, X, y)


def compare_throughput(args: argparse.Namespace, X: torch.Tensor, y: torch.Tensor) -> None:
    images = synthetic_images()
    print(f"{'model':<28}{'contender':<24}{'samples/s':>12}{'vs non-private':>16}")
    summary, breakdowns = {}, {}
    for label, build, (data, target) in [("MLP 64-128-10, digits", mlp, (X, y)),
                                         ("CNN, 1x28x28 synthetic", cnn, images)]:
        rates = throughput(build, data, target, 256, args.seconds, args.rounds)
        base = rates["pytorch (non-private)"]
        for name, rate in rates.items():
            print(f"{label:<28}{name:<24}{rate:>12,.0f}{rate / base:>15.2f}x")
        best_opacus = max(rates["opacus hooks"], rates["opacus ghost"])
        summary[label] = (rates["veil"] / base, rates["veil"] / rates["opacus hooks"],
                          rates["veil"] / best_opacus)
        if "veil (baseline)" in rates:
            print(f"{label:<28}{'veil / baseline':<24}{'':>12}"
                  f"{rates['veil'] / rates['veil (baseline)']:>15.2f}x")
        steps = max(20, int(args.seconds * base / 256))  # about --seconds per round
        breakdowns[label] = phase_times(build, data, target, 256, steps, args.rounds)
    print("\nWhere a step's time goes (median us per step of 256)")
    print(f"{'model':<28}{'contender':<24}{''.join(f'{p:>10}' for p in PHASES)}{'total':>10}")
    for label, phases in breakdowns.items():
        for name, times in phases.items():
            cells = "".join(f"{times[p]:>10.0f}" for p in PHASES)
            print(f"{label:<28}{name:<24}{cells}{sum(times.values()):>10.0f}")
    print()
    for label, (vs_plain, vs_hooks, vs_best) in summary.items():
        print(f"{label}: veil = {vs_plain:.2f}x non-private, {vs_hooks:.1f}x Opacus hooks, "
              f"{vs_best:.1f}x the faster Opacus mode")


def compare_ratios(args: argparse.Namespace, X: torch.Tensor, y: torch.Tensor) -> None:
    """veil / non-private per round, ``args.ratios`` rounds alternating the two (the order
    within a round alternates too), ``args.seconds`` of steps each; median and range."""
    import os

    images = synthetic_images()
    print(f"{'model':<28}{'rounds':>7}{'median':>9}{'lowest':>9}{'highest':>9}"
          f"{'non-private /s':>16}{'veil /s':>10}{'load before/after':>20}")
    for label, build, (data, target) in [("MLP 64-128-10, digits", mlp, (X, y)),
                                         ("CNN, 1x28x28 synthetic", cnn, images)]:
        load = os.getloadavg()[0]
        steps = {"plain": plain_step(build, data, target, 256),
                 "veil": veil_step(build, data, target, 256)}
        if "veil (baseline)" in CONTENDERS:   # --baseline: timed in the same rotation
            steps["baseline"] = CONTENDERS["veil (baseline)"](build, data, target, 256)
        for step in steps.values():  # warm up
            for _ in range(5):
                step()
        rates: dict[str, list[float]] = {name: [] for name in steps}
        for k in range(args.ratios):
            for name in (list(steps)[::-1] if k % 2 else list(steps)):
                done, start = 0, clock()
                while clock() - start < args.seconds:
                    done += steps[name]()
                rates[name].append(done / (clock() - start))
        ratios = [v / p for v, p in zip(rates["veil"], rates["plain"])]
        print(f"{label:<28}{args.ratios:>7}{statistics.median(ratios):>8.2f}x"
              f"{min(ratios):>8.2f}x{max(ratios):>8.2f}x"
              f"{statistics.median(rates['plain']):>16,.0f}{statistics.median(rates['veil']):>10,.0f}"
              f"{f'{load:.1f} / {os.getloadavg()[0]:.1f}':>20}")
        if "baseline" in rates:
            old = [v / p for v, p in zip(rates["baseline"], rates["plain"])]
            mine = [v / b for v, b in zip(rates["veil"], rates["baseline"])]
            print(f"{'  baseline / non-private':<28}{'':>7}{statistics.median(old):>8.2f}x"
                  f"{min(old):>8.2f}x{max(old):>8.2f}x; veil / baseline median "
                  f"{statistics.median(mine):.2f}x")


def compare_accuracy(args: argparse.Namespace, X: torch.Tensor, y: torch.Tensor) -> None:
    print(f"\nAccuracy on digits (MLP, {args.epochs} epochs, batch 256, C = 1, SGD lr "
          f"{args.lr}, delta 1e-5, mean of {args.seeds} seeds)")
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(X), generator=g)
    cut = int(0.8 * len(X))
    Xtr, ytr, Xte, yte = X[order[:cut]], y[order[:cut]], X[order[cut:]], y[order[cut:]]
    q = 1.0 / len(torch.utils.data.DataLoader(range(cut), batch_size=256))  # Opacus's rate
    print(f"{'epsilon':>8}{'veil':>10}{'opacus':>10}{'ratio':>8}{'diff +- 2 SE':>16}"
          f"{'sigma veil':>12}{'sigma opacus':>14}")
    for epsilon in (1.0, 3.0, 8.0):
        ours, theirs, s_ours, s_theirs = [], [], 0.0, 0.0
        for seed in range(args.seeds):
            model, s_ours = train_veil(Xtr, ytr, epsilon, args.epochs, args.lr, q, seed)
            ours.append(accuracy(model, Xte, yte))
            model, s_theirs = train_opacus(Xtr, ytr, epsilon, args.epochs, args.lr, 256, seed)
            theirs.append(accuracy(model, Xte, yte))
        a, b = float(np.mean(ours)), float(np.mean(theirs))
        se = float(np.sqrt((np.var(ours, ddof=1) + np.var(theirs, ddof=1)) / args.seeds))
        print(f"{epsilon:>8g}{a:>10.3f}{b:>10.3f}{a / b:>8.2f}"
              f"{f'{a - b:+.3f} +- {2 * se:.3f}':>16}{s_ours:>12.3f}{s_theirs:>14.3f}")


if __name__ == "__main__":
    main()
