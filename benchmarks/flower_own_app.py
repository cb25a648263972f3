"""The peer of bench_flower.py: Flower's OWN FedAvg and SecAgg+ on the data of a veil run file.

Flower 1.42's server strategy ``flwr.server.strategy.FedAvg`` driven by its
``DefaultWorkflow``, with ``SecAggPlusWorkflow`` (and ``secaggplus_mod`` on the clients) for
SecAgg+; each client trains the same veil model on the same share of the same data with the
same local SGD settings as veil's FedAvg (``veil.fl.trainer.LocalTrainer``), so that only the
federated machinery differs. The ServerApp writes ``own.json`` into ``[run] out``: per round
its wall time, the bytes of the messages' contents both ways (``recorddict_to_proto``
sizes, as bench_flower counts veil's Flower envelopes), and per stage the wall time.

bench_flower.py runs it on Flower's simulation engine (:func:`simulate`) and, copied into an
app directory beside ``run.toml`` (:func:`write_app`), on a loopback deployment.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import ndarrays_to_parameters
from flwr.common.serde import recorddict_to_proto
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from veil.experiments.fl_config import load_config
from veil.fl.trainer import LocalTrainer
from veil.random import Generator

CONFIG = Path(__file__).with_name("run.toml")
_STAGES = ("setup_stage", "share_keys_stage", "collect_masked_vectors_stage",
           "unmask_stage")


def _run(config: Path) -> tuple[Any, list, Any]:
    cfg = load_config(config)
    clients, _, classes = cfg.data(cfg["run"]["seed"])
    model = cfg.model().initialize(clients[0][0].shape[1], classes)
    return cfg, clients, model


class _Client(NumPyClient):
    def __init__(self, cfg: Any, trainer: LocalTrainer, seed: int) -> None:
        self.cfg, self.trainer, self.seed = cfg, trainer, seed

    def fit(self, parameters: list, config: dict) -> tuple[list, int, dict]:
        t = self.cfg["training"]
        params = self.trainer.train(np.asarray(parameters[0], dtype=np.float64),
                                    epochs=t["local_epochs"], learning_rate=t["learning_rate"],
                                    batch_size=t["batch_size"] or None,
                                    rng=Generator(self.seed))
        return [params], self.trainer.n_examples, {}


def client(config: Path = CONFIG, secagg: bool = False) -> ClientApp:
    def client_fn(context: Any) -> Any:
        cfg, clients, model = _run(config)
        index = context.node_config.get("party-id", context.node_config.get("partition-id"))
        X, y = clients[int(index)]
        return _Client(cfg, LocalTrainer(model, X, y), int(index)).to_client()

    return ClientApp(client_fn=client_fn, mods=[secaggplus_mod] if secagg else [])


class _Timed(FedAvg):
    """Flower's FedAvg, noting when each round starts and ends."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.marks: list[tuple[str, float]] = []

    def configure_fit(self, server_round, parameters, client_manager):
        self.marks.append(("start", time.perf_counter()))
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):
        out = super().aggregate_fit(server_round, results, failures)
        self.marks.append(("end", time.perf_counter()))
        return out


def _timed(stage: Any, name: str, stages: list[dict]) -> Any:
    """A SecAggPlusWorkflow stage that notes its wall time in ``stages``."""
    def timed(grid: Any, context: Any, state: Any) -> Any:
        began = time.perf_counter()
        try:
            return stage(grid, context, state)
        finally:
            stages.append({"stage": name.removesuffix("_stage"),
                           "seconds": time.perf_counter() - began})
    return timed


def server(config: Path = CONFIG, secagg: bool = False, out: Path | None = None) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        cfg, clients, model = _run(config)
        n, rounds = len(clients), cfg["training"]["rounds"]
        counts = {"up": 0, "down": 0}
        stages: list[dict] = []
        send = grid.send_and_receive

        def counted(messages, *, timeout=None):
            messages = list(messages)
            counts["down"] += sum(recorddict_to_proto(m.content).ByteSize() for m in messages)
            replies = list(send(messages, timeout=timeout))
            counts["up"] += sum(recorddict_to_proto(r.content).ByteSize()
                                for r in replies if r.has_content())
            return replies

        grid.send_and_receive = counted
        strategy = _Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n,
                          min_available_clients=n, initial_parameters=ndarrays_to_parameters(
                              [model.get_params_vector()]))
        fit = None
        if secagg:
            s = cfg["secagg"]
            neighbours = s["neighbours"] or n - 1
            fit = SecAggPlusWorkflow(
                num_shares=neighbours + 1,
                reconstruction_threshold=math.floor(s["threshold"] * neighbours) + 1,
                clipping_range=s["clip_range"], quantization_range=2 ** s["bits"] // n,
                modulus_range=2 ** s["bits"], max_weight=float(max(len(y) for _, y in clients)),
                timeout=cfg["run"]["timeout"])
            for name in _STAGES:
                setattr(fit, name, _timed(getattr(fit, name), name, stages))
        # a round waits at most [run] timeout for its replies, as veil's stages do
        legacy = LegacyContext(context=context, strategy=strategy, config=ServerConfig(
            num_rounds=rounds, round_timeout=cfg["run"]["timeout"]))
        per_round: list[dict] = []
        before = dict(counts)
        DefaultWorkflow(fit_workflow=fit)(grid, legacy)
        starts = [t for kind, t in strategy.marks if kind == "start"]
        ends = [t for kind, t in strategy.marks if kind == "end"]
        for began, ended in zip(starts, ends):
            per_round.append({"time": ended - began})
        where = Path(out or str(context.run_config["out"]))
        where.mkdir(parents=True, exist_ok=True)
        (where / "own.json").write_text(json.dumps({
            "rounds": per_round, "bytes_up": (counts["up"] - before["up"]) / rounds,
            "bytes_down": (counts["down"] - before["down"]) / rounds, "stages": stages}))

    return app
