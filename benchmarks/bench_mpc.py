"""Secure multi-party computation: veil (local and multi-process runtimes) against MPyC.

Three parties, the same inputs, three tasks, each timed from the sharing of the inputs to
the revealed result (session start-up is reported apart):

* ``dot``: x . y for x, y in R^``--dim`` (x from party 0, y from party 1);
* ``compare``: x < y elementwise for ``--dim`` pairs;
* ``logreg``: logistic regression on ``--rows`` x ``--features`` data (X from party 0,
  labels from party 1), ``--iters`` full-batch gradient-descent steps with learning rate 1
  and an intercept, with the same 7-knot piecewise-linear sigmoid on both sides
  (:mod:`veil.mpc.protocols`: ``m_j ReLU(z - t_j)`` summed, one batched comparison).

veil: additive shares mod 2^64, 16 fractional bits, trusted dealer (correlated randomness
counted as "dealer bytes"), ``runtime="local"`` (all parties in this process) and
``runtime="process"`` (one process per party, loopback TCP). MPyC 0.11: SecFxp(32, 16) on
Shamir shares over a prime field (threshold 1 of 3: honest majority, no dealer), run as 3
local processes with ``-M3`` as its documentation describes (it has no multi-party mode in
one process; ``-M1`` would be a single party). CrypTen is not installable here (no release
since 2022, no wheel for this Python/torch), so it is not in the table.

    python benchmarks/bench_mpc.py                  # all tasks, 1 MPyC run, best of 3 for veil
    python benchmarks/bench_mpc.py --tasks logreg --mpyc-repeats 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

KNOTS = np.array([-4.25, -2.4, -1.2, 0.0, 1.2, 2.4, 4.25])
VALUES = np.array([0.00775, 0.07543, 0.22373, 0.5, 0.77627, 0.92457, 0.99225])
CHANGES = np.diff(np.concatenate([[0.0], np.diff(VALUES) / np.diff(KNOTS), [0.0]]))
TASKS = ("dot", "compare", "logreg")


def data(args):
    """The benchmark's inputs (public seed: both libraries get the same numbers)."""
    from veil.random import default_rng

    rng = default_rng(2024)
    x, y = rng.normal(size=args.dim), rng.normal(size=args.dim)
    X = rng.normal(size=(args.rows, args.features))
    labels = (X @ rng.normal(size=args.features) + 0.3 * rng.normal(size=args.rows) > 0)
    return x, y, X, labels.astype(np.float64)


def reference_logreg(X, labels, iters):
    n = X.shape[0]
    Xb = np.c_[X, np.ones(n)]
    w = np.zeros(Xb.shape[1])
    for _ in range(iters):
        w = w - 1.0 / n * (Xb.T @ (np.interp(Xb @ w, KNOTS, VALUES) - labels))
    return w


# -- veil ------------------------------------------------------------------------------------
def veil_task(s, task, args, inputs):
    from veil.mpc import concatenate
    from veil.mpc.models import LogisticRegression

    x, y, X, labels = inputs
    if task == "dot":
        return (s.share(x, owner=0) @ s.share(y, owner=1)).reveal()
    if task == "compare":
        return (s.share(x, owner=0) < s.share(y, owner=1)).reveal()
    model = LogisticRegression(learning_rate=1.0, max_iter=args.iters)
    model.fit(s.share(X, owner=0), s.share(labels, owner=1))
    return concatenate([model.coef_, model.intercept_.reshape(1)]).reveal()


def run_veil(runtime, tasks, args, inputs):
    from veil.mpc import Session

    start = time.perf_counter()
    out = {}
    with Session(parties=3, runtime=runtime) as s:
        out["startup"] = time.perf_counter() - start
        for task in tasks:
            best = None
            for _ in range(args.repeats):
                with s.measure() as m:
                    value = veil_task(s, task, args, inputs)
                if best is None or m.cost.seconds < best[0].seconds:
                    best = (m.cost, value)
            out[task] = best
    return out


# -- MPyC (runs in its own processes: this script with --mpyc-worker) ----------------------
def mpyc_worker(args):
    from mpyc.runtime import mpc

    secfxp = mpc.SecFxp(32, 16)
    x, y, X, labels = data(args)

    def sigmoid(z):
        n = z.shape[0]
        d = z.reshape(1, n) - KNOTS.reshape(-1, 1)
        return (CHANGES.reshape(1, -1) @ ((d >= 0) * d)).reshape(n) + VALUES[0]

    async def main():
        await mpc.start()
        start = time.perf_counter()
        if args.task == "dot":
            value = await mpc.output(mpc.input(secfxp.array(x), senders=0)
                                     @ mpc.input(secfxp.array(y), senders=1))
            result = float(value)
        elif args.task == "compare":
            value = await mpc.output(mpc.input(secfxp.array(x), senders=0)
                                     < mpc.input(secfxp.array(y), senders=1))
            result = [int(v) for v in np.asarray(value, dtype=float)]
        else:
            n = X.shape[0]
            Xb = mpc.np_hstack((mpc.input(secfxp.array(X), senders=0),
                                secfxp.array(np.ones((n, 1)))))
            ys = mpc.input(secfxp.array(labels), senders=1)
            w = secfxp.array(np.zeros(Xb.shape[1]))
            for _ in range(args.iters):
                w = w - (Xb.T @ (sigmoid(Xb @ w) - ys)) * (1.0 / n)
            result = [float(v) for v in await mpc.output(w)]
        seconds = time.perf_counter() - start
        sent = [p.protocol.nbytes_sent for p in mpc.parties if p.pid != mpc.pid]
        await mpc.shutdown()
        if mpc.pid == 0:
            print("RESULT " + json.dumps({"seconds": seconds, "result": result,
                                          "sent": sum(sent)}))

    mpc.run(main())


def run_mpyc(task, args, port):
    cmd = [sys.executable, __file__, "--mpyc-worker", "--task", task, "--dim", str(args.dim),
           "--rows", str(args.rows), "--features", str(args.features), "--iters",
           str(args.iters), "-M3", "-B", str(port), "--no-log"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - start
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"MPyC run failed:\n{done.stdout}\n{done.stderr}")
    out = json.loads(lines[-1][7:])
    out["wall"] = wall
    return out


# -- main ------------------------------------------------------------------------------------
def check(task, value, inputs, args):
    x, y, X, labels = inputs
    if task == "dot":
        return abs(float(value) - x @ y)
    if task == "compare":
        return float(np.sum(np.asarray(value) != (x < y)))
    return float(np.max(np.abs(np.asarray(value) - reference_logreg(X, labels, args.iters))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--features", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="veil: best of this many runs")
    ap.add_argument("--mpyc-repeats", type=int, default=1)
    ap.add_argument("--skip-mpyc", action="store_true")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--mpyc-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    args, _ = ap.parse_known_args()
    if args.mpyc_worker:
        mpyc_worker(args)
        return 0

    inputs = data(args)
    veil = {rt: run_veil(rt, args.tasks, args, inputs) for rt in ("local", "process")}
    mpyc = {}
    if not args.skip_mpyc:
        port = 23000 + int(time.time()) % 2000 * 10
        for task in args.tasks:
            runs = [run_mpyc(task, args, port + k) for k in range(args.mpyc_repeats)]
            mpyc[task] = min(runs, key=lambda r: r["seconds"])

    print(f"3 parties; dot/compare on {args.dim} values; logistic regression "
          f"{args.rows}x{args.features}, {args.iters} iterations")
    print(f"session start-up: veil local {veil['local']['startup']:.3f} s, veil process "
          f"{veil['process']['startup']:.3f} s")
    head = ("| task | veil local s | veil process s | MPyC s | MPyC / veil local | "
            "MPyC / veil process | veil rounds | veil sent per party (B) | veil dealer (B) | "
            "MPyC sent by party 0 (B) | error veil / MPyC |")
    print(head)
    print("|" + " --- |" * 11)
    for task in args.tasks:
        loc, proc = veil["local"][task][0], veil["process"][task][0]
        err = check(task, veil["local"][task][1], inputs, args)
        row = [task, f"{loc.seconds:.4f}", f"{proc.seconds:.4f}"]
        if task in mpyc:
            m = mpyc[task]
            row += [f"{m['seconds']:.3f}", f"{m['seconds'] / loc.seconds:.1f}x",
                    f"{m['seconds'] / proc.seconds:.1f}x"]
            merr = check(task, m["result"], inputs, args)
        else:
            row += ["-", "-", "-"]
            merr = float("nan")
        row += [str(max(loc.rounds)), "/".join(map(str, loc.sent)), str(loc.dealer[0]),
                str(mpyc[task]["sent"]) if task in mpyc else "-", f"{err:.2g} / {merr:.2g}"]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
