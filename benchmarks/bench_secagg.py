"""Secure aggregation: veil's SecAgg+ against plaintext FedAvg and Flower's SecAgg+.

One round, ``--clients`` clients with a ``--dim``-parameter update each (fixed random
vectors in [-R, R], no training, so only the protocols are timed), a SecAgg+ graph of
``--neighbours`` neighbours, share threshold t = floor(threshold * degree) + 1, and
``--dropout`` of the clients dropping out after the key shares were sent (the costly case:
the server must rebuild their mask keys and remove their pairwise masks). ``--complete``
runs veil on the complete graph (Bonawitz et al.'s original SecAgg: every secret shared
among all other clients, threshold t = floor(threshold * (clients - 1)) + 1) while Flower
keeps SecAgg+ on ``--neighbours``.

* veil: :class:`veil.fl.strategies.SecAgg` in the ring Z_2^bits, driven by the local
  runtime (every message serialized; CPU time measured per client and for the server);
* plaintext: veil's FedAvg transport, each update sent in the clear (float64);
* Flower 1.x: ``SecAggPlusWorkflow`` + ``secaggplus_mod`` driven in this process through a
  minimal in-memory ``Grid`` that serializes every message with Flower's protobuf serde
  (what its gRPC transport sends) and invokes the ``ClientApp`` directly; the same
  modulus, clipping range and quantization step, the same neighbours (num_shares =
  neighbours + 1, Flower counts the client itself) and threshold, the same dropouts.

Client CPU is per client per round (mean over all sampled clients); server CPU is
everything the server does in the round (encoding requests, decoding answers, unmasking);
"unmask" is the server's final stage alone. Bytes are per surviving client, up and down;
"expansion" divides a client's SecAgg traffic (both ways) without the model download by
the raw ``dim * bits / 8`` bytes of its update (Bonawitz et al. 2017 report 1.73x for
2^10 users and 2^20 16-bit entries); for plaintext it is the upload over the raw size.

    python benchmarks/bench_secagg.py                          # 100 clients, 100,000 params
    python benchmarks/bench_secagg.py --clients 20 --dim 10000 # quick
    python benchmarks/bench_secagg.py --complete               # veil on the complete graph

veil runs twice: with the malicious-server checks (signed keys and the consistency round,
Bonawitz et al. 2017 section 6; the default) and without them (``SecAgg(consistency=False)``,
the semi-honest protocol), ``--repeat`` times each, interleaved; the table shows medians and
the last line the overhead of the checks (goal <= 10% CPU). ``--digits`` measures the same
overhead in rounds that train: ``examples/fl_digits.toml`` (20 clients, softmax regression
trained with FedProx, SecAgg+ on 10 neighbours), one round per run, no faults.

    python benchmarks/bench_secagg.py --no-flower --digits
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings

import numpy as np

from veil.fl import Faults, LocalRuntime
from veil.fl.protocol import ClientUpdate
from veil.fl.secagg import SecAggServer
from veil.fl.strategies import FedAvg, SecAgg
from veil.random import Generator

warnings.filterwarnings("ignore")


# -- veil ----------------------------------------------------------------------------------
class _Model:
    def __init__(self, d: int) -> None:
        self.n_params_ = d


class _Client:
    """What the protocols read from a trainer: the model size, the data size, the update."""

    def __init__(self, delta: np.ndarray) -> None:
        self.model, self.delta, self.n_examples = _Model(delta.size), delta, 1


class Fixed(FedAvg):
    """FedAvg whose clients send a given vector instead of training."""

    def client_update(self, trainer, params, config, rng):
        return ClientUpdate(trainer.delta, 1.0)


def run_veil(updates, args, secure: bool, consistency: bool = True) -> dict:
    inner = Fixed(weighted=False)
    strategy = SecAgg(inner, bits=args.bits, clip_range=args.range,
                      neighbours=None if args.complete else args.neighbours,
                      threshold=args.threshold, min_survivors=0.5,
                      consistency=consistency) if secure else inner
    clients = {i: strategy.client(i, _Client(u)) for i, u in enumerate(updates)}
    unmask = [0.0]
    if secure:
        original = SecAggServer._after_unmask

        def timed(self, answers):
            start = time.process_time()
            try:
                return original(self, answers)
            finally:
                unmask[0] = time.process_time() - start

        SecAggServer._after_unmask = timed
    rng = Generator(args.seed)
    params = np.zeros(args.dim)
    server = strategy.server(0, params, strategy.sample(0, list(clients), rng), rng)
    faults = Faults(dropout=args.dropout, dropout_exact=True, dropout_stage="masked_input") \
        if secure else Faults()
    report = LocalRuntime(faults).run_round(server, clients, rng)
    if secure:
        SecAggServer._after_unmask = original
    assert report.completed, report.error
    survivors = list(report.result.clients)
    error = np.max(np.abs(report.result.params - np.mean([updates[i] for i in survivors], 0)))
    traffic = report.client_bytes()
    sent = np.mean([traffic[c][0] for c in survivors])
    received = np.mean([traffic[c][1] for c in survivors])
    return {"client_cpu": float(np.mean([report.client_cpu[c] for c in clients])),
            "server_cpu": report.server_cpu, "unmask": unmask[0], "up": sent,
            "down": received, "model_down": 8 * args.dim, "survivors": len(survivors),
            "max_error": float(error)}


def run_digits(seed: int, consistency: bool) -> dict:
    """One training round of examples/fl_digits.toml: client CPU (mean) and server CPU."""
    from pathlib import Path

    from veil.experiments.fl_config import load_config
    from veil.fl import Federation

    cfg = load_config(Path(__file__).resolve().parents[1] / "examples" / "fl_digits.toml")
    clients, _, classes = cfg.data(cfg["run"]["seed"])
    base = cfg.strategy(clients)
    strategy = SecAgg(base.inner, bits=base.bits, clip_range=base.clip_range,
                      neighbours=base.neighbours, threshold=base.threshold,
                      min_survivors=base.min_survivors, prg=base.prg, consistency=consistency)
    fed = Federation(clients, cfg.model(), strategy, 1, classes=classes, rng=seed)
    rng = Generator(seed)
    server = strategy.server(0, fed.params, strategy.sample(0, sorted(fed.clients), rng), rng)
    report = LocalRuntime().run_round(server, fed.clients, rng)
    assert report.completed, report.error
    return {"client_cpu": float(np.mean(list(report.client_cpu.values()))),
            "server_cpu": report.server_cpu}


def print_digits(args) -> None:
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for k in range(args.repeat):
        for consistency in (True, False):
            runs[consistency].append(run_digits(args.seed + k, consistency))
    med = {c: {k: float(np.median([r[k] for r in rs])) for k in rs[0]}
           for c, rs in runs.items()}
    print(f"\nexamples/fl_digits.toml, one training round, medians of {args.repeat}:")
    print("| | client CPU s | server CPU s |\n|---|---|---|")
    for c, name in ((True, "with the checks"), (False, "semi-honest")):
        print(f"| {name} | {med[c]['client_cpu']:.4f} | {med[c]['server_cpu']:.4f} |")
    print(f"checks vs semi-honest: client CPU "
          f"{med[True]['client_cpu'] / med[False]['client_cpu']:.3f}x, server CPU "
          f"{med[True]['server_cpu'] / med[False]['server_cpu']:.3f}x (goal <= 1.10x)")


# -- Flower ------------------------------------------------------------------------------
def run_flower(updates, args) -> dict:
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.client import NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.common.serde import message_from_proto, message_to_proto
    from flwr.compat.common import recorddict_compat as compat
    from flwr.proto.message_pb2 import Message as ProtoMessage
    from flwr.server import ServerConfig
    from flwr.server.client_manager import SimpleClientManager
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.strategy import FedAvg as FlowerFedAvg
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key
    from flwr.serverapp.grid import Grid
    from flwr.supercore.task_identity import TaskIdentity

    logging.getLogger("flwr").setLevel(logging.ERROR)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    vectors = {i + 1: u.astype(np.float32) for i, u in enumerate(updates)}

    class Client(NumPyClient):
        def __init__(self, node_id: int) -> None:
            self.node_id = node_id

        def fit(self, parameters, config):
            return [vectors[self.node_id]], 1, {}

    app = ClientApp(client_fn=lambda context: Client(context.node_id).to_client(),
                    mods=[secaggplus_mod])
    n_drop = round(args.dropout * len(vectors))

    def wire(message):
        data = message_to_proto(message).SerializeToString()
        proto = ProtoMessage()
        proto.ParseFromString(data)
        return data, message_from_proto(proto)

    class InProcessGrid(Grid):
        """Delivers each message to the ClientApp after a protobuf round trip."""

        def __init__(self) -> None:
            self.contexts = {n: Context(run_id=1, node_id=n, node_config={},
                                        state=RecordDict(), run_config={}) for n in vectors}
            self.stage = 0
            self.up = dict.fromkeys(vectors, 0)
            self.down = dict.fromkeys(vectors, 0)
            self.client_cpu = dict.fromkeys(vectors, 0.0)

        def set_run(self, run):
            pass

        @property
        def run(self):
            return None

        def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
            return Message(content=content, dst_node_id=dst_node_id,
                           message_type=message_type, group_id=group_id)

        def get_node_ids(self):
            return list(vectors)

        def push_messages(self, messages):
            raise NotImplementedError("send_and_receive only")

        def pull_messages(self, message_ids):
            raise NotImplementedError("send_and_receive only")

        def send_and_receive(self, messages, *, timeout=None):
            self.stage += 1
            out = []
            for msg in messages:
                node = msg.metadata.dst_node_id
                data, delivered = wire(msg)  # the server's encoding
                self.down[node] += len(data)
                start = time.process_time()
                _, delivered = wire(msg)
                reply = app(delivered, self.contexts[node])
                data, back = wire(reply)
                self.client_cpu[node] += time.process_time() - start
                if self.stage == 3 and node <= n_drop:  # drops out after sharing its keys
                    continue
                self.up[node] += len(data)
                out.append(back)
            return out

    grid = InProcessGrid()
    manager = SimpleClientManager()
    for node in vectors:
        manager.register(GridClientProxy(node, grid, 1))
    context = LegacyContext(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                    run_config={}), config=ServerConfig(num_rounds=1),
                            strategy=FlowerFedAvg(), client_manager=manager)
    config = ConfigRecord()
    config[Key.CURRENT_ROUND] = 1
    context.state.config_records[MAIN_CONFIGS_RECORD] = config
    context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([np.zeros(args.dim, np.float32)]), True)
    # same grid: modulus 2^bits shared by m clients, same clipping range and step
    levels = (2 ** args.bits) // len(vectors)
    workflow = SecAggPlusWorkflow(num_shares=args.neighbours + 1,
                                  reconstruction_threshold=math.floor(
                                      args.threshold * args.neighbours) + 1,
                                  max_weight=1.0, clipping_range=args.range,
                                  quantization_range=levels, modulus_range=2 ** args.bits)
    unmask = [0.0]
    stage = workflow.unmask_stage

    def timed(g, c, s):
        start, before = time.process_time(), sum(grid.client_cpu.values())
        try:
            return stage(g, c, s)
        finally:
            unmask[0] = time.process_time() - start - (sum(grid.client_cpu.values()) - before)

    workflow.unmask_stage = timed
    start = time.process_time()
    workflow(grid, context)
    total = time.process_time() - start
    result = parameters_to_ndarrays(compat.arrayrecord_to_parameters(
        context.state.array_records[MAIN_PARAMS_RECORD], keep_input=True))[0]
    survivors = [n for n in vectors if n > n_drop]
    error = np.max(np.abs(result - np.mean([vectors[n] for n in survivors], axis=0)))
    client_cpu = sum(grid.client_cpu.values())
    return {"client_cpu": client_cpu / len(vectors), "server_cpu": total - client_cpu,
            "unmask": unmask[0], "up": float(np.mean([grid.up[n] for n in survivors])),
            "down": float(np.mean([grid.down[n] for n in survivors])),
            "model_down": 4 * args.dim,
            "survivors": len(survivors), "max_error": float(error)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--dim", type=int, default=100_000)
    parser.add_argument("--bits", type=int, default=16)
    parser.add_argument("--range", type=float, default=0.5, help="clipping range R")
    parser.add_argument("--neighbours", type=int, default=16)
    parser.add_argument("--complete", action="store_true",
                        help="veil on the complete graph (original SecAgg); Flower keeps "
                             "SecAgg+ with --neighbours")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-flower", action="store_true")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each veil variant (medians reported)")
    parser.add_argument("--digits", action="store_true",
                        help="also the overhead in training rounds (examples/fl_digits.toml)")
    args = parser.parse_args()

    gen = Generator(args.seed)
    updates = [gen.uniform(-args.range, args.range, args.dim) for _ in range(args.clients)]
    ours_name = "veil SecAgg (complete graph)" if args.complete else "veil SecAgg+"
    semi_name = ours_name + ", semi-honest (no consistency round)"
    runs: dict[str, list[dict]] = {ours_name: [], semi_name: []}
    for _ in range(args.repeat):   # interleaved: the machine's load hits both alike
        runs[ours_name].append(run_veil(updates, args, True))
        runs[semi_name].append(run_veil(updates, args, True, consistency=False))
    rows = {name: {k: float(np.median([r[k] for r in rs])) for k in rs[0]}
            for name, rs in runs.items()}
    rows["plaintext FedAvg (veil)"] = run_veil(updates, args, False)
    if not args.no_flower:
        rows["Flower SecAgg+"] = run_flower(updates, args)
    raw = args.dim * args.bits / 8
    graph = f"veil: complete graph ({args.clients - 1} neighbours), Flower: " \
        if args.complete else ""
    print(f"{args.clients} clients, {args.dim:,} parameters, {args.bits}-bit ring, "
          f"{graph}{args.neighbours} neighbours, threshold {args.threshold}, "
          f"{args.dropout:.0%} dropouts after sharing; raw update {raw / 1e3:.0f} kB")
    head = ("", "client CPU s", "server CPU s", "unmask s", "up kB", "down kB",
            "expansion", "survivors", "max error")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, r in rows.items():
        secure = "plaintext" not in name
        expansion = (r["up"] + r["down"] - r["model_down"]) / raw if secure else r["up"] / raw
        print(f"| {name} | {r['client_cpu']:.4f} | {r['server_cpu']:.3f} | "
              f"{r['unmask']:.3f} | {r['up'] / 1e3:.1f} | {r['down'] / 1e3:.1f} | "
              f"{expansion:.2f} | {r['survivors']} | {r['max_error']:.2e} |")
    ours = rows[ours_name]
    plain = rows["plaintext FedAvg (veil)"]
    plain16 = plain["up"] - 8 * args.dim + raw  # the same message with 16-bit entries
    print(f"\nupload vs plaintext float64: {ours['up'] / plain['up']:.3f}x; vs plaintext with "
          f"{args.bits}-bit entries: {ours['up'] / plain16:.3f}x (goal <= 2x)")
    goal = "server CPU <= 0.5 s, unmask <= 0.3 s" if args.complete else "unmask <= 2 s"
    print(f"server CPU {ours['server_cpu']:.3f} s, unmasking {ours['unmask']:.3f} s ({goal})")
    semi = rows[semi_name]
    print(f"malicious-server checks (signed keys + consistency round) vs semi-honest, medians "
          f"of {args.repeat}: client CPU {ours['client_cpu'] / semi['client_cpu']:.3f}x, "
          f"server CPU {ours['server_cpu'] / semi['server_cpu']:.3f}x, upload "
          f"{ours['up'] / semi['up']:.4f}x, download {ours['down'] / semi['down']:.4f}x "
          "(goal <= 1.10x CPU)")
    if "Flower SecAgg+" in rows:
        fl = rows["Flower SecAgg+"]
        print(f"vs Flower: client CPU {fl['client_cpu'] / ours['client_cpu']:.1f}x, server CPU "
              f"{fl['server_cpu'] / ours['server_cpu']:.1f}x, unmask "
              f"{fl['unmask'] / ours['unmask']:.1f}x, upload {fl['up'] / ours['up']:.1f}x "
              "(Flower / veil; > 1: veil is faster / smaller)")
    if args.digits:
        print_digits(args)


if __name__ == "__main__":
    main()
