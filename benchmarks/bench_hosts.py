"""Parties on different hosts: mutual TLS on loopback against the in-process runtime.

The same protocols, timed both ways in one run:

* ``logreg``: secure logistic regression (``--rows`` x ``--features`` rows split between
  ``--parties`` parties, each sharing its own rows with ``Session.share_data``;
  ``--iters`` gradient steps), under ``runtime="local"`` (every party in this process) and
  ``runtime="hosts"`` (every party a forked process serving ``veil.mpc.runtime.serve_party``
  on 127.0.0.1, linked by mutual TLS 1.3; this process is the driver). Timed from the first
  share to the revealed weights; session start-up (TLS handshakes) apart. Bytes: the
  parties' protocol bytes, identical under both runtimes (the same messages; checked).
* ``keygen``: dealer-free threshold Paillier key generation, ``--bits`` bits, 3 parties,
  threshold 2: ``veil.crypto.dkg.run_local`` (all parties in this process, one core)
  against ``veil.crypto.hosts.keygen_on_hosts`` (3 forked processes over mutual TLS).
  The run time is geometric in the number of candidates: medians over ``--runs`` runs, and
  CPU per party per 1,000 candidates (the figure that does not depend on luck).

    python benchmarks/bench_hosts.py                       # both, 2048-bit keys, 3 runs
    python benchmarks/bench_hosts.py --only logreg --parties 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_hosts(folder: Path, n: int, driver: str | None) -> Path:
    import socket

    from veil.net.certs import issue

    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    lines = ['session = "bench"', 'ca = "certs/ca.crt"'] + ([f'driver = "{driver}"']
                                                            if driver else [])
    for i, port in enumerate(ports):
        lines += ["[[party]]", f"index = {i}", f'name = "p{i}"', f'address = "127.0.0.1:{port}"']
    path = folder / "hosts.toml"
    path.write_text("\n".join(lines) + "\n")
    issue(folder / "certs", {**{f"p{i}": ("127.0.0.1",) for i in range(n)},
                             **({driver: ()} if driver else {})})
    return path


def fork(target, *args) -> multiprocessing.Process:
    proc = multiprocessing.get_context("fork").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


# -- logistic regression ------------------------------------------------------------------
def lr_data(args):
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = ((X - X.mean(0)) / X.std(0))[:args.rows, :args.features]
    y = y[:args.rows].astype(float)
    cuts = np.array_split(np.arange(args.rows), args.parties)
    return {i: {"X": X[c], "y": y[c]} for i, c in enumerate(cuts)}


def lr_program(s, args):
    from veil.mpc import concatenate
    from veil.mpc.models import LogisticRegression

    with s.measure() as m:
        X = concatenate([s.share_data("X", owner=i) for i in range(s.parties)], axis=0)
        y = concatenate([s.share_data("y", owner=i) for i in range(s.parties)], axis=0)
        model = LogisticRegression(learning_rate=1.0, max_iter=args.iters).fit(X, y).reveal()
    return m.cost, model.coef_


def lr_party(hosts_path, index, data):
    from veil.mpc.runtime import serve_party
    from veil.net import Identity, load_hosts

    hosts = load_hosts(hosts_path)
    serve_party(hosts, Identity(hosts, f"p{index}"), data)


def bench_logreg(args) -> None:
    from veil.mpc import Session

    data = lr_data(args)
    t0 = time.perf_counter()
    with Session(parties=args.parties, data=data) as s:
        local_start = time.perf_counter() - t0
        local = min((lr_program(s, args) for _ in range(args.repeats)),
                    key=lambda r: r[0].seconds)
    with tempfile.TemporaryDirectory() as tmp:
        hosts = make_hosts(Path(tmp), args.parties, "driver")
        best = None
        for _ in range(args.repeats):
            procs = [fork(lr_party, str(hosts), i, data[i]) for i in range(args.parties)]
            t0 = time.perf_counter()
            with Session(runtime="hosts", hosts=hosts, timeout=120) as s:
                start = time.perf_counter() - t0
                run = lr_program(s, args)
            for p in procs:
                p.join(60)
            if best is None or run[0].seconds < best[1][0].seconds:
                best = (start, run)
    tls_start, remote = best
    assert remote[0].sent == local[0].sent and remote[0].rounds == local[0].rounds
    diff = float(np.max(np.abs(remote[1] - local[1])))
    print(f"\nsecure logistic regression: {args.parties} parties, {args.rows}x{args.features},"
          f" {args.iters} iterations (best of {args.repeats})")
    print("| runtime | start-up s | session s | rounds | protocol bytes sent per party | "
          "dealer bytes |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    for name, st, (cost, _) in (("local (in process)", local_start, local),
                                ("hosts (mutual TLS, loopback)", tls_start, remote)):
        print(f"| {name} | {st:.3f} | {cost.seconds:.3f} | {max(cost.rounds)} | "
              f"{'/'.join(map(str, cost.sent))} | {cost.dealer[0]} |")
    print(f"TLS / local session time: {remote[0].seconds / local[0].seconds:.2f}x; "
          f"max |weights difference| {diff:.2g} (fixed-point rounding of the secure randomness)")


# -- key generation -----------------------------------------------------------------------
def keygen_party(hosts_path, index, bits, queue):
    from veil.crypto.hosts import keygen_on_hosts
    from veil.net import Identity, load_hosts

    hosts = load_hosts(hosts_path)
    share, stats = keygen_on_hosts(hosts, Identity(hosts, f"p{index}"), bits=bits,
                                   threshold=2, insecure_ok=bits < 2048, timeout=600,
                                   connect_timeout=60)
    queue.put((index, share.public_key.fingerprint, stats))


def bench_keygen(args) -> None:
    from veil.crypto import dkg
    from veil.random import Generator

    local, remote = [], []
    for _ in range(args.runs):
        params = dkg.KeygenParams.make(args.bits, 3, 2, insecure_ok=args.bits < 2048)
        base = Generator()
        session = base.bytes(16)
        members = [dkg.KeygenParty(i + 1, params, session, rng=r)
                   for i, r in enumerate(base.spawn(3))]
        _, st = dkg.run_local(members)
        local.append({"wall": st.wall, "cpu": statistics.mean(st.cpu),
                      "mb": statistics.mean(st.bytes_sent) / 1e6, "candidates": st.candidates})
        print(f"in process: {st.wall:.1f} s, {st.candidates} candidates", flush=True)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            hosts = make_hosts(Path(tmp), 3, None)
            queue = multiprocessing.get_context("fork").Queue()
            procs = [fork(keygen_party, str(hosts), i, args.bits, queue) for i in range(3)]
            got = [queue.get(timeout=1800) for _ in range(3)]
            for p in procs:
                p.join(60)
        assert len({fp for _, fp, _ in got}) == 1, "the parties hold different keys"
        stats = [s for _, _, s in sorted(got, key=lambda g: g[0])]
        remote.append({"wall": max(s["seconds"] for s in stats),
                       "cpu": statistics.mean(s["cpu"] for s in stats),
                       "mb": statistics.mean(s["sent"] for s in stats) / 1e6,
                       "candidates": stats[0]["candidates"]})
        print(f"over TLS: {remote[-1]['wall']:.1f} s, {remote[-1]['candidates']} candidates",
              flush=True)
    print(f"\ndealer-free key generation: {args.bits}-bit, 3 parties, threshold 2, "
          f"{args.runs} runs each (medians)")
    print("| runtime | wall s | CPU s / party | CPU s / party / 1000 candidates | MB sent / party |"
          " candidates |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, rows in (("in process (run_local)", local), ("3 processes, mutual TLS", remote)):
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        per = statistics.median(1000 * r["cpu"] / r["candidates"] for r in rows)
        walls = ", ".join(f"{r['wall']:.1f}" for r in rows)
        print(f"| {name} | {med['wall']:.1f} ({walls}) | {med['cpu']:.2f} | {per:.2f} | "
              f"{med['mb']:.2f} | {med['candidates']:.0f} |")
    ratio = statistics.median(r["wall"] for r in remote) / statistics.median(
        r["wall"] for r in local)
    print(f"median wall time, TLS / in process: {ratio:.2f}x (3 processes may use both cores; "
          "the in-process run uses one)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("logreg", "keygen"))
    ap.add_argument("--parties", type=int, default=3, help="logreg parties")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--features", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="logreg: best of this many")
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3, help="keygen runs per runtime")
    args = ap.parse_args()
    if args.only in (None, "logreg"):
        bench_logreg(args)
    if args.only in (None, "keygen"):
        bench_keygen(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
