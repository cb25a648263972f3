"""The hybrid approach (Truex et al. 2019): per-round time and bytes, packed vs one value per
ciphertext vs plaintext FedAvg, with python-paillier as the encryption peer.

Two models, 10 parties, t = 5 honest (t_bar = 6 decrypt), threshold Paillier keys of
``--bits`` bits, Skellam noise shares:

* Adult logistic regression (104 features: 105 parameters + the record count = 106
  values per query), each party holding a tenth of UCI Adult's training split (falls back
  to synthetic data of the same shape without the UCI files);
* a 10,000-parameter softmax regression (999 features x 10 classes + 10 intercepts) on
  synthetic data, 200 records per party (``--params`` changes the size).

One round = one gradient query of :class:`veil.learn.private.GradientQueries` through the
sans-I/O objects of :mod:`veil.fl.hybrid.protocol`, driven here stage by stage so that each
party's and the aggregator's CPU time is measured separately (``time.process_time``; every
message serialized and parsed as on a wire). Noise pools are filled before the round
(offline). Reported:

* **online, parties in parallel** -- what a deployment waits for: the slowest party's
  answer (gradient, noise, packing, encryption), the aggregator's product of the
  ciphertexts, the slowest partial decryption, and the aggregator's proof checks,
  combination and decoding;
* **one machine** -- every party's and the aggregator's CPU time added up (the local
  runtime's figure on one core);
* bytes up and down per round (all parties).

The 10,000-parameter round is also run **through the runtime** as ``veil fl run`` runs it
(``Federation`` + the ``Hybrid`` strategy; every message serialized, parsed and validated;
each party's pool filled before the rounds, in the process where the party lives) and
its wall time measured: in this process (``LocalRuntime()``: every party's work on one
core, one after the other) and with the parties in ``--workers`` persistent worker
processes (``LocalRuntime(workers=2)``: both cores), over ``--runtime-rounds`` rounds
(the aggregator picks the 6 decrypting parties at random each round). Beside each round's
wall time: the CPU seconds of the run's processes, and those the machine's other
processes used in the same seconds (Linux ``/proc``): on a shared machine other jobs slow
the multi-process rows down, and this says which rounds had the cores to themselves.

Baselines in the same run: the same protocol with one ciphertext per value ("unpacked";
for more than ``--unpacked-max`` values it is measured on that many values and scaled
linearly -- each value costs the same encryption, product and partial decryption, so the
cost is linear in the count -- and the table says so), veil's plaintext FedAvg round (one
full-batch local step, updates in the clear), and python-paillier 1.5 (GPLv3, benchmark
only) encrypting one party's values one per ciphertext on a key of the same size.

    python benchmarks/bench_hybrid.py              # 2048-bit keys (about 3 minutes)
    python benchmarks/bench_hybrid.py --quick      # 1024-bit keys, 2,000 parameters
    python benchmarks/bench_hybrid.py --workers 2,10   # also one process per party
    python benchmarks/bench_hybrid.py --runtime-only --workers 1,2   # the runtime rows alone
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings

import numpy as np

from veil.crypto import threshold
from veil.datasets import available, load_xy, partition
from veil.dp import Ledger
from veil.dp.distributed import Trust
from veil.fl import Federation, LocalRuntime, Message
from veil.fl.hybrid.protocol import (
    Agreement,
    HybridClient,
    HybridServer,
    QueryEncoding,
    deal_keys,
    make_identities,
)
from veil.fl.strategies import FedAvg, Hybrid
from veil.learn import LogisticRegression, SoftmaxRegression
from veil.learn.private.queries import GradientQueries
from veil.random import Generator

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

PARTIES, TRUST = 10, 5
HONEST = Trust(PARTIES, TRUST)   # t = 5 honest of 10: threshold 6
MAX_RECORDS = 2 ** 12          # public bound on one party's records (sets the slot width)


DECRYPT: dict[int, tuple[float, float, float]] = {}   # values -> (root, DJ, aggregator) s


def _cpu(fn, *args, **kwargs):
    start = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - start


def _data(kind: str, params: int, gen: np.random.Generator):
    if kind == "adult" and available("adult-train"):
        data = load_xy("adult", split="train")
        X, y = data.X, data.y
    elif kind == "adult":
        X = gen.uniform(0, 1, size=(30162, 104))
        y = (X[:, :5].sum(axis=1) > 2.5).astype(int)
    else:
        d = (params - 10) // 10
        X = gen.normal(size=(200 * PARTIES, d)) / np.sqrt(d)
        y = gen.integers(0, 10, size=200 * PARTIES)
    parts = partition.iid(len(y), PARTIES, rng=1)
    return [(X[p], y[p]) for p in parts]


def _model(kind: str, data):
    d = data[0][0].shape[1]
    if kind == "adult":
        return LogisticRegression(alpha=0.0).initialize(d, [0, 1])
    return SoftmaxRegression(alpha=0.0).initialize(d, list(range(10)))


def hybrid_round(keys, data, model, *, packed: bool, z: float, values: int | None = None):
    """One round stage by stage; (online s, one-machine s, bytes up, bytes down, ciphertexts
    per party). ``values``: truncate the query to its first ``values`` values (unpacked
    extrapolation)."""
    learner = GradientQueries(model, rounds=1, max_records=MAX_RECORDS)
    query = learner.next_query()
    if values is not None:
        from dataclasses import replace

        shape = replace(query.shape, size=values)
        query = replace(query, shape=shape)
        full = learner.answer

        def truncated(q, X, y):
            out, clipped = full(q, X, y)
            return out[:values], clipped
        learner.answer = truncated
    identities, public = make_identities(PARTIES)
    agreement = Agreement(PARTIES, "hybrid", trust=HONEST, noise="skellam", noise_multiplier=z,
                          delta=1e-5, packed=packed, identities=public)
    count = QueryEncoding(query.shape, agreement, keys.public_key.bits).ciphertexts
    clients = {}
    for i, (X, y) in enumerate(data):
        clients[i] = HybridClient(i, X, y, agreement, learner=learner, key_share=keys.shares[i],
                                  identity=identities[i])
        clients[i].precompute(count)                                  # offline
    server = HybridServer(0, range(PARTIES), query, agreement, keys.public_key, rng=1)
    gen = Generator(7)
    up = down = 0
    requests, server_cpu = _cpu(server.start)
    party_cpu: dict[str, list[float]] = {"answer": [], "decrypt": []}
    while not server.done:
        answers = []
        stage = requests[0].stage
        for req in requests:
            raw = req.to_bytes()
            down += len(raw)
            replies, cpu = _cpu(clients[req.recipient].handle, Message.from_bytes(raw), gen)
            party_cpu[stage].append(cpu)
            answers += [r.to_bytes() for r in replies]
        up += sum(len(a) for a in answers)

        requests, cpu = _cpu(_serve, server, answers)
        server_cpu += cpu
    online = max(party_cpu["answer"]) + max(party_cpu["decrypt"]) + server_cpu
    machine = sum(party_cpu["answer"]) + sum(party_cpu["decrypt"]) + server_cpu
    if values is None and packed:
        _, dj = _cpu(keys.shares[0].partial_decrypt, server.total, method="dj")
        DECRYPT[query.shape.size] = (max(party_cpu["decrypt"]), dj, server_cpu)
    return online, machine, up, down, count


def runtime_rounds(keys, data, model, z: float, workers: int, rounds: int):
    """``rounds`` hybrid rounds of a Federation on ``LocalRuntime(workers=workers)``: per
    round (wall s, CPU s of this run's processes, CPU s of the machine's other processes
    meanwhile), and the wall seconds to ship the parties and fill their pools."""
    strategy = Hybrid(HONEST, rounds=rounds, noise_multiplier=z, delta=1e-5,
                      max_records=MAX_RECORDS, keys=keys)
    per_round = []
    with LocalRuntime(workers=workers) as runtime:
        fed = Federation(data, model.__class__(alpha=0.0), strategy, rounds, runtime=runtime,
                         ledger=Ledger(1e6, 1e-3, accountant="rdp"), rng=3)
        began = time.perf_counter()
        runtime.call(fed.clients, HybridClient.precompute, rounds * strategy.ciphertexts)
        offline = time.perf_counter() - began
        pids = [os.getpid(), *runtime.pids]
        last = (_cpu_seconds(pids), _machine_busy())

        def account(record):
            nonlocal last
            now = (_cpu_seconds(pids), _machine_busy())
            ours, busy = now[0] - last[0], now[1] - last[1]
            per_round.append((record["time"], ours, None if busy is None else busy - ours))
            last = now

        fed.on_progress = account
        history = fed.run()
    assert all(r["status"] == "ok" for r in history.rounds)
    return per_round, offline


def _cpu_seconds(pids) -> float:
    """User + system CPU seconds used so far by the processes ``pids``, all their threads
    (Linux /proc; NaN elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _machine_busy() -> float | None:
    """CPU seconds every process of the machine has used so far (Linux /proc/stat)."""
    try:
        with open("/proc/stat") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")   # less idle, iowait


def _serve(server, answers):
    for a in answers:
        server.receive(Message.from_bytes(a))
    return server.close_stage()


def fedavg_round(data, model_kind):
    fed = Federation(data, _model(model_kind, data).__class__(alpha=0.0),
                     FedAvg(learning_rate=0.5), 2, runtime=LocalRuntime(), rng=3)
    history = fed.run()
    last = history.rounds[-1]
    return last["time"], last["bytes_up"], last["bytes_down"]


def phe_encrypt(values: int, bits: int, gen: np.random.Generator) -> float:
    """python-paillier: seconds to encrypt ``values`` integers one per ciphertext."""
    from phe import paillier as phe

    pk, _ = phe.generate_paillier_keypair(n_length=bits)
    xs = gen.integers(-2 ** 30, 2 ** 30, size=values).tolist()
    _, cpu = _cpu(lambda: [pk.encrypt(int(x)) for x in xs])
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--params", type=int, default=10_000)
    ap.add_argument("--unpacked-max", type=int, default=300,
                    help="measure one-value-per-ciphertext on at most this many values")
    ap.add_argument("--quick", action="store_true", help="1024-bit keys, 2,000 parameters")
    ap.add_argument("--workers", default="2",
                    help="worker processes for the runtime rows (comma-separated)")
    ap.add_argument("--runtime-rounds", type=int, default=3,
                    help="rounds per multi-process runtime row")
    ap.add_argument("--runtime-only", action="store_true",
                    help="only the rounds through the runtime (--workers rows)")
    args = ap.parse_args()
    if args.quick:
        args.bits, args.params = 1024, 2_000
    gen = np.random.default_rng(0)
    t0 = time.perf_counter()
    primes = threshold.generate_safe_primes(args.bits, insecure_ok=args.bits < 2048, rng=5)
    keys = deal_keys(HONEST, bits=args.bits, primes=primes,
                     insecure_ok=args.bits < 2048, rng=6)
    print(f"threshold Paillier {args.bits}-bit, {keys.public_key.threshold}-of-{PARTIES} "
          f"(t = {TRUST}): keys dealt in {time.perf_counter() - t0:.1f} s")
    rows = []
    if args.runtime_only:
        data = _data("synthetic", args.params, gen)
        model = _model("synthetic", data)
        runtime = {"online": float("nan"), "machine": float("nan"), "params": model.n_params_}
        for w in (int(x) for x in args.workers.split(",")):
            runtime[w] = runtime_rounds(keys, data, model, 5.0, w, args.runtime_rounds)
        _print_runtime(runtime, args.bits)
        return
    for kind, label in (("adult", "Adult logistic regression"),
                        ("synthetic", f"{args.params:,}-parameter softmax regression")):
        data = _data(kind, args.params, gen)
        model = _model(kind, data)
        n_values = model.n_params_ + 1
        z = 5.0       # the noise multiplier does not change the cost
        on, machine, up, down, cts = hybrid_round(keys, data, model, packed=True, z=z)
        k = min(n_values, args.unpacked_max)
        u_on, u_machine, u_up, u_down, _ = hybrid_round(keys, data, model, packed=False, z=z,
                                                        values=k)
        scale = n_values / k
        f_time, f_up, f_down = fedavg_round(data, kind)
        phe_s = phe_encrypt(k, args.bits, gen) * scale
        veil_enc = _party_encrypt(keys, data, model, z)
        rows.append({"model": label, "values": n_values, "ciphertexts": cts, "online": on,
                     "machine": machine, "up": up, "down": down, "u_online": u_on * scale,
                     "u_machine": u_machine * scale, "u_up": u_up * scale,
                     "scaled": k < n_values, "fedavg": f_time, "f_up": f_up,
                     "encrypt": veil_enc, "phe": phe_s})
    runtime = {"online": on, "machine": machine, "params": n_values - 1}
    runtime[1] = runtime_rounds(keys, data, model, z, 1, 1)
    for w in (int(x) for x in args.workers.split(",")):
        runtime[w] = runtime_rounds(keys, data, model, z, w, args.runtime_rounds)
    _print(rows, args.bits)
    _print_decrypt(rows)
    _print_runtime(runtime, args.bits)


def _party_encrypt(keys, data, model, z):
    """CPU seconds for one party to pack and encrypt its answer: (fresh noise, from a filled
    pool)."""
    learner = GradientQueries(model, rounds=1, max_records=MAX_RECORDS)
    query = learner.next_query()
    identities, public = make_identities(PARTIES)
    agreement = Agreement(PARTIES, "hybrid", trust=HONEST, noise="skellam", noise_multiplier=z,
                          delta=1e-5, identities=public)
    enc = QueryEncoding(query.shape, agreement, keys.public_key.bits)
    client = HybridClient(0, *data[0], agreement, learner=learner, key_share=keys.shares[0],
                          identity=identities[0])
    ints = np.zeros(query.shape.size, dtype=np.int64)
    pk = keys.public_key
    pk.encrypt(enc.plaintexts(ints[:1]))          # builds the fixed-base noise table once
    _, fresh = _cpu(lambda: pk.encrypt(enc.plaintexts(ints)))
    client.precompute(enc.ciphertexts)
    _, pooled = _cpu(lambda: pk.encrypt(enc.plaintexts(ints), pool=client.pool))
    return fresh, pooled


def _print(rows, bits):
    def mb(b):
        return f"{b / 1e6:.2f} MB" if b >= 1e5 else f"{b / 1e3:.1f} kB"

    print(f"\nPer round, 10 parties, {bits}-bit keys (CPU seconds; 'online' = parties in "
          "parallel, pools filled offline)")
    print(" | ".join(("model", "values", "ciphertexts/party", "hybrid online",
                      "hybrid 1 machine", "unpacked online", "unpacked 1 machine",
                      "packed speed-up (online)", "plaintext FedAvg",
                      "bytes up (hybrid / unpacked / FedAvg)")))
    for r in rows:
        mark = " (scaled)" if r["scaled"] else ""
        print(" | ".join([r["model"], f"{r['values']:,}", f"{r['ciphertexts']}",
                          f"{r['online']:.3f} s", f"{r['machine']:.2f} s",
                          f"{r['u_online']:.2f} s{mark}", f"{r['u_machine']:.2f} s{mark}",
                          f"{r['u_online'] / r['online']:.1f}x", f"{r['fedavg']:.3f} s",
                          f"{mb(r['up'])} / {mb(r['u_up'])}{mark} / {mb(r['f_up'])}"]))
    print("\nOne party encrypting its answer: veil packed (noise computed now / from a pool "
          "filled offline) vs python-paillier (one value per ciphertext, noise computed now, "
          "its own key of the same size)")
    print("model | values | veil packed | veil packed, pool | python-paillier | ratio "
          "(noise computed now)")
    for r in rows:
        fresh, pooled = r["encrypt"]
        print(f"{r['model']} | {r['values']:,} | {fresh:.3f} s | {pooled:.4f} s | "
              f"{r['phe']:.2f} s{' (scaled)' if r['scaled'] else ''} | {r['phe'] / fresh:.0f}x")


def _print_decrypt(rows):
    print("\nOne party's partial decryption of the aggregate (slowest of the round; CPU s) with "
          "root decryption (veil's hybrid) and with Damgard-Jurik's c^(2 Delta s_i) mod n^2 on the "
          "same ciphertexts; the aggregator's CPU for the whole round")
    print("model | ciphertexts | root | Damgard-Jurik | DJ / root | aggregator")
    for r in rows:
        root, dj, server = DECRYPT[r["values"]]
        print(f"{r['model']} | {r['ciphertexts']} | {root:.3f} s | {dj:.3f} s | "
              f"{dj / root:.1f}x | {server:.3f} s")


def _print_runtime(r, bits):
    print(f"\n{r['params']:,}-parameter round through the runtime ({PARTIES} parties, t = "
          f"{TRUST}, {bits}-bit keys; pools filled before the rounds). Wall seconds per "
          "round; CPU seconds of this run's processes (all threads) and, in the same time, of "
          "the machine's other processes (other jobs on a shared machine)")
    print("runtime | rounds | wall per round: mean (min-max) | each round: wall / CPU ours / "
          "CPU others | shipping + pool filling (offline) | 'online' (parties in parallel) | "
          "one machine (CPU sum)")
    for w in sorted(k for k in r if isinstance(k, int)):
        per_round, offline = r[w]
        walls = [x[0] for x in per_round]
        label = "in-process LocalRuntime()" if w == 1 else f"LocalRuntime(workers={w})"
        each = ", ".join(f"{wall:.2f} / {ours:.1f} / "
                         + ("?" if others is None else f"{others:.1f}")
                         for wall, ours, others in per_round)
        print(f"{label} | {len(walls)} | {np.mean(walls):.2f} s ({min(walls):.2f}-"
              f"{max(walls):.2f}) | {each} | {offline:.2f} s | {r['online']:.2f} s | "
              f"{r['machine']:.2f} s")


if __name__ == "__main__":
    main()
