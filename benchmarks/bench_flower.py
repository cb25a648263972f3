"""Bytes and seconds per round: veil's local runtime against veil on Flower's simulation
engine and on a Flower deployment on loopback (issue 15), for FedAvg and SecAgg+ on the same
parties, seeds and model (one TOML file per run, as `veil fl run` reads), beside Flower's OWN
FedAvg and SecAgg+ (its strategy and DefaultWorkflow / SecAggPlusWorkflow, flower_own_app.py)
on the same data, model, local training and SecAgg+ parameters, in the same run.

All veil runtimes move the same veil messages (local and simulation give the same model:
checked here); Flower adds its envelope around each (a ConfigRecord holding the bytes),
counted from Flower's own serializer, and its delivery latency. Flower's own runs count the
serialized contents of their messages the same way. "s/round" is the mean wall time of the
rounds after the first (round 1 under simulation also warms the Ray actors); "start" is the
time before the first round (Ray, or SuperLink + SuperNodes + `flwr run`). With --deploy the
per-stage breakdown of the deployed runs follows: each stage's wall time, the most CPU one
party spent on it (veil), and the rest -- Flower's own latency (SuperNode polling, one
process per message, transport).

--vertical adds a deployed vertical logistic regression (issue 30's "under 2 minutes"): the
slow test's shape (breast cancer split between a bank holding the label and 8 columns and
an insurer holding 22, an arbiter with the 512-bit test key, 1 epoch, one batch of ~300
aligned rows), a SuperLink and three SuperNodes, each organisation with its own folder;
with the time of every exchange (its calls, wall s, the busiest party's CPU s). --only
runs some of fedavg, secagg, secagg-semi (veil's SecAgg+ without its consistency round:
semi-honest like Flower's own workflow, 4 stages), vertical; --no-sim leaves out the runs
on Flower's simulation engine (the local run stays: the last column's reference).

    .venv/bin/python benchmarks/bench_flower.py [--parties 10] [--rounds 3] [--deploy]
        [--vertical] [--only fedavg,secagg,secagg-semi,vertical] [--no-sim]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from flwr.common.serde import recorddict_to_proto
from flwr.simulation import run_simulation

sys.path.insert(0, str(Path(__file__).parent))

import flower_own_app  # noqa: E402

from veil.crypto.identity import write_identities  # noqa: E402
from veil.errors import VeilError  # noqa: E402
from veil.experiments.flower_app import Loopback, _federation, write_app  # noqa: E402
from veil.fl import LocalRuntime  # noqa: E402
from veil.fl.runtime.flower import _record, simulate  # noqa: E402

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
timeout = 120
"""
SECAGG = "\n[secagg]\nbits = 32\nclip_range = 2.0\nneighbours = 4\n"
_OWN_APP = """from pathlib import Path

from flower_own_app import client as _client, server as _server

CONFIG = Path(__file__).with_name("run.toml")
server = _server(CONFIG, secagg={secagg})
client = _client(CONFIG, secagg={secagg})
"""


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


def _nodes(config: Path, parties: int, work: Path) -> list[dict]:
    """Every node's configuration: its party and its own copy of the run file."""
    plans = work / "plans"
    plans.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, plans / config.name)
    return [{"party-id": i, "plans": str(plans)} for i in range(parties)]


def _deployed(config: Path, parties: int, work: Path) -> tuple[list[dict], float, list]:
    """veil's run on a loopback deployment; a SecAgg+ one with the parties' identity table
    (each node names its own identity key, as on a real deployment)."""
    keys = {}
    if "[secagg]" in config.read_text():
        table = write_identities(work / "identities", parties)
        deployed = work / config.name
        deployed.write_text(config.read_text().replace(
            "[secagg]\n", f'[secagg]\nidentities = "{table.resolve()}"\n'))
        config = deployed
        keys = {i: str((work / "identities" / f"identity-{i}.key").resolve())
                for i in range(parties)}
    nodes = _nodes(config, parties, work)
    for i, key in keys.items():
        nodes[i]["identity-key"] = key
    app = write_app(config, work / "app", results=work / "results")
    began = time.perf_counter()
    with Loopback(work / "deployment", parties, nodes=nodes) as d:
        d.run(app, timeout=900)
    total = time.perf_counter() - began
    results = work / "results"
    return (json.loads((results / "results.json").read_text())["rounds"], total,
            json.loads((results / "stages.json").read_text()))


def _own_app(config: Path, secagg: bool, work: Path) -> Path:
    """Flower's own FedAvg / SecAgg+ as an app directory for `flwr run`."""
    app = work / "own-app"
    app.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, app / "run.toml")
    shutil.copyfile(Path(flower_own_app.__file__), app / "flower_own_app.py")
    (app / "own.py").write_text(_OWN_APP.format(secagg=secagg))
    (app / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "flower-own"\nversion = "1.0.0"\ndependencies = []\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["."]\n\n'
        '[tool.flwr.app]\npublisher = "veil"\n\n[tool.flwr.app.components]\n'
        'serverapp = "own:server"\nclientapp = "own:client"\n\n'
        f'[tool.flwr.app.config]\nout = "{(work / "own-results").resolve()}"\n')
    return app


def _own(config: Path, parties: int, secagg: bool, work: Path, deploy: bool) -> tuple:
    """Flower's own run: (per-round records, total seconds, bytes up, bytes down, stages)."""
    began = time.perf_counter()
    if deploy:
        nodes = [{"party-id": i} for i in range(parties)]
        with Loopback(work / "own-deployment", parties, nodes=nodes) as d:
            d.run(_own_app(config, secagg, work), timeout=900)
        own = json.loads((work / "own-results" / "own.json").read_text())
    else:
        run_simulation(server_app=flower_own_app.server(config, secagg, out=work / "own-sim"),
                       client_app=flower_own_app.client(config, secagg),
                       num_supernodes=parties,
                       backend_config={"client_resources": {"num_cpus": 1.0,
                                                            "num_gpus": 0.0}})
        own = json.loads((work / "own-sim" / "own.json").read_text())
    total = time.perf_counter() - began
    return own["rounds"], total, own["bytes_up"], own["bytes_down"], own["stages"]


#: what --only chooses from: secagg-semi is veil's SecAgg+ without the consistency round
#: (semi-honest, as Flower's own SecAggPlusWorkflow; 4 stages, not 5)
RUNS = ("fedavg", "secagg", "secagg-semi", "vertical")
VERTICAL = """
[vertical]
model = "logistic"
protocol = "paillier"
parties = { bank = "bank.csv", insurer = "insurer.csv" }
epochs = 1
batch_size = 400
learning_rate = 0.3
test_fraction = 0.3
key_bits = 512
insecure_ok = true
identities = "identities.json"

[run]
seed = 4
"""


def _vertical(work: Path) -> tuple[dict, float, list]:
    """The deployed vertical run (module docstring): its results, total seconds (SuperLink
    and nodes up to the run's end) and per-exchange timeline (stages.json)."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    from veil.experiments.flower_vertical_app import vertical_app

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    ids = [f"c{i:04d}" for i in range(len(y))]
    bank = pd.DataFrame(X[:, :8], columns=[f"b{j}" for j in range(8)]).assign(y=y)
    bank.insert(0, "id", ids)
    insurer = pd.DataFrame(X[:, 8:], columns=[f"i{j}" for j in range(22)])
    insurer.insert(0, "id", ids)
    tables = {"bank": bank.iloc[:500],
              "insurer": insurer.iloc[60:].sample(frac=1.0, random_state=1)}
    work.mkdir(parents=True, exist_ok=True)
    config = work / "run.toml"
    config.write_text(VERTICAL)
    keys = work / "keys"
    table = write_identities(keys, 2)
    nodes = []
    for i, name in enumerate(("bank", "insurer", "arbiter")):
        org = work / f"org-{name}"
        (org / "plans").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config, org / "plans" / "run.toml")
        shutil.copyfile(table, org / "plans" / "identities.json")
        node = {"party": name, "plans": str(org / "plans"), "out": str(org / "model")}
        if name in tables:
            tables[name].to_csv(org / f"{name}.csv", index=False)
            node.update(data=str(org / f"{name}.csv"),
                        **{"identity-key": str(keys / f"identity-{i}.key")})
        nodes.append(node)
    app = vertical_app(config, work / "app", results=work / "results")
    began = time.perf_counter()
    with Loopback(work / "deployment", 3, nodes=nodes) as d:
        d.run(app, timeout=900)
    total = time.perf_counter() - began
    results = json.loads((work / "results" / "results.json").read_text())
    return results, total, json.loads((work / "results" / "stages.json").read_text())


def _vertical_report(results: dict, total: float, stages: list) -> None:
    wall = sum(s["seconds"] for s in stages)
    cpu = sum(s["client_cpu"] for s in stages)
    print(f"\nvertical LR deployed: total {total:.1f} s (SuperLink, 3 SuperNodes, flwr run); "
          f"training {results['seconds']:.1f} s in {len(stages)} exchanges + the handshake, "
          f"{results['batches']} batch(es); accuracy {results['accuracy']:.3f}")
    print(f"  exchanges: wall {wall:.1f} s, busiest party's CPU {cpu:.1f} s, the rest "
          f"(Flower: polls, a process per message, transport) {wall - cpu:.1f} s")
    for k, s in enumerate(stages):
        calls = "; ".join(f"{p}: {', '.join(m)}" for p, m in s["calls"].items())
        print(f"  {k + 1:2d} {s['seconds']:7.2f} {s['client_cpu']:7.3f}  {calls}")


def _row(name, runtime, veil_bytes, flower_bytes, rounds, total, base):
    seconds = np.mean([r["time"] for r in rounds[1:] or rounds])
    start = total - sum(r["time"] for r in rounds)
    print(f"{name:8} {runtime:19} {veil_bytes:12.0f} {flower_bytes:12.0f} {seconds:9.3f} "
          f"{start:8.1f} {total:8.1f} {seconds / base:16.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parties", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deploy", action="store_true",
                        help="also run each strategy on a loopback deployment (slow)")
    parser.add_argument("--vertical", action="store_true",
                        help="also a deployed vertical logistic regression (slow)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated: some of {', '.join(RUNS)}")
    parser.add_argument("--no-sim", action="store_true",
                        help="leave out the runs on Flower's simulation engine (Ray)")
    args = parser.parse_args()
    runs = {"fedavg", "secagg", *(("vertical",) if args.vertical else ())}
    if args.only is not None:
        runs = set(args.only.split(","))
        if not runs <= set(RUNS):
            parser.error(f"--only {args.only!r}: expected some of {', '.join(RUNS)}")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    envelope = _envelope(1000)
    print(f"{args.parties} parties, digits (64 features, 10 classes, 650 parameters), "
          f"{args.rounds} rounds; Flower envelope per veil message: {envelope} bytes")
    print(f"{'strategy':8} {'runtime':19} {'bytes/round':>12} {'on Flower':>12} "
          f"{'s/round':>9} {'start s':>8} {'total s':>8} {'s/round / local':>16}")
    work = Path(tempfile.mkdtemp(prefix="veil-bench-flower-"))
    breakdowns = []
    for key, name, secagg in (("fedavg", "FedAvg", ""), ("secagg", "SecAgg+", SECAGG),
                              ("secagg-semi", "SecAgg+sh", SECAGG + "consistency = false\n")):
        if key not in runs:
            continue
        config = work / f"{key}.toml"
        config.write_text(CONFIG.format(parties=args.parties, rounds=args.rounds,
                                        secagg=secagg))
        counting = _Counting()
        _, fed = _federation(config)
        fed.runtime = counting
        began = time.perf_counter()
        local = fed.run()
        rows = {"local": (local.rounds, time.perf_counter() - began)}
        if not args.no_sim:
            _, fed = _federation(config)
            began = time.perf_counter()
            flower = simulate(fed, timeout=300.0)
            rows["flower-sim"] = (flower.rounds, time.perf_counter() - began)
            assert np.array_equal(local.params, flower.params), "the runtimes disagree"
        if args.deploy:
            try:
                rounds, total, stages = _deployed(config, args.parties, work / name)
                rows["deployed"] = (rounds, total)
                breakdowns.append((f"veil {name}", stages))
            except VeilError as exc:      # e.g. the SuperLink's SQLite locked under load
                print(f"{name:8} deployed: failed: {str(exc)[:300]}")
        messages = float(np.mean(counting.messages))  # the same messages under Flower
        base = np.mean([r["time"] for r in local.rounds[1:] or local.rounds])
        for runtime, (rounds, total) in rows.items():
            veil_bytes = np.mean([r["bytes_up"] + r["bytes_down"] for r in rounds])
            extra = 0 if runtime == "local" else messages * envelope
            _row(name, runtime, veil_bytes, veil_bytes + extra, rounds, total, base)
        own = () if key == "secagg-semi" else \
            ((False,) if not args.no_sim else ()) + ((True,) if args.deploy else ())
        for deploy in own:   # Flower's own SecAgg+ is semi-honest: the SecAgg+ row's
            where = "deployed" if deploy else "sim"
            try:
                rounds, total, up, down, stages = _own(config, args.parties, bool(secagg),
                                                       work / name, deploy)
            except VeilError as exc:
                print(f"{name:8} Flower own {where}: failed: {str(exc)[:300]}")
                continue
            _row(name, f"Flower own {where}", float("nan"), up + down, rounds, total, base)
            if deploy and stages:
                breakdowns.append((f"Flower's own {name}", stages))
    if "vertical" in runs:
        try:
            _vertical_report(*_vertical(work / "vertical"))
        except VeilError as exc:
            print(f"vertical deployed: failed: {str(exc)[:300]}")
    for title, stages in breakdowns:
        print(f"\n{title}, deployed: per stage (mean over rounds) wall s, veil's busiest "
              "party's CPU s, the rest (Flower's own latency)")
        names = list(dict.fromkeys(s["stage"] for s in stages))
        for stage in names:
            rows = [s for s in stages if s["stage"] == stage]
            wall = np.mean([s["seconds"] for s in rows])
            cpu = np.mean([s.get("client_cpu", float("nan")) for s in rows])
            print(f"  {stage:16} {wall:8.2f} {cpu:8.3f} {wall - cpu:8.2f}")


if __name__ == "__main__":
    main()
