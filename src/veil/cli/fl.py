"""``veil fl``: federated learning runs from a TOML configuration."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from veil.cli._output import console, err_console, print_json, print_table
from veil.errors import ConfigError

app = typer.Typer(help="Federated learning.", no_args_is_help=True)

_COLUMNS = ("round", "status", "accuracy", "loss", "epsilon", "aggregated", "bytes_up",
            "bytes_down", "time")


def _seeds(state_file: Path, seed: int | None, resume: bool) -> tuple[int, bytes]:
    """The seeds of the data split and of the canary clients (coins and directions):
    derived from the run's seed, or drawn once from secure randomness and kept in
    ``state_file``, so that a resumed run sees the same clients and the same canaries."""
    if seed is not None:
        return seed, b"veil.fl canaries " + seed.to_bytes(16, "big", signed=True)
    if resume and state_file.exists():
        state = json.loads(state_file.read_text())
        return int(state["partition_seed"]), bytes.fromhex(state["canary_seed"])
    if resume and state_file.parent.joinpath("checkpoint.veil").exists():
        raise ConfigError(f"cannot resume: {state_file} (the seed of the data split) is "
                          "missing; without it the clients would get other data")
    from veil.random import secure_rng

    draw = secure_rng()
    return int(draw.randbits(62)), draw.bytes(32)


def _write_run(out_dir: Path, name: str, cfg: Any, history: Any, canaries: Any) -> Path:
    """run.json in the format ``veil audit`` reads (:mod:`veil.audit.rundir`)."""
    from veil.audit import Run, RunRecord, write_run

    summary = history.to_dict()["summary"]
    last = history.rounds[-1] if history.rounds else {}
    arrays = {} if canaries is None else {"client_canary_scores": canaries.scores(),
                                          "client_canary_included": canaries.included}
    record = RunRecord(
        label=name, ledger="ledger.sqlite" if cfg.has("privacy") else None,
        accuracy=summary["accuracy"],
        metrics={} if last.get("loss") is None else {"loss": last["loss"]},
        cost={"seconds": summary["time"], "rounds": summary["rounds"],
              "bytes": summary["bytes"]},
        arrays=arrays)
    return write_run(out_dir, Run(name=name, kind=cfg.kind, records=[record]))


Config = Annotated[Path, typer.Argument(help="TOML file describing the run.")]
Resume = Annotated[bool, typer.Option("--resume",
                                      help="Continue an interrupted run from its checkpoint.")]
Out = Annotated[Path | None, typer.Option("--out", help="Output directory (default: run.out "
                                          "in the config, else fl_results/<config name>).")]
Json = Annotated[bool, typer.Option("--json", help="Print the results as JSON.")]
Report = Annotated[bool, typer.Option("--report", help="Also write the privacy report "
                                      "(report.json, report.html) into <out>/audit.")]
Runtime = Annotated[str, typer.Option("--runtime", help="How messages move: 'local' (this "
                                      "process, or [run] workers) or 'flower-sim' (Flower's "
                                      "simulation engine, one virtual node and 1 CPU per client;"
                                      " needs veil[flower]).")]
RUNTIMES = ("local", "flower-sim")


@app.command("run")
def run(config: Config, resume: Resume = False, out: Out = None, json_: Json = False,
        report: Report = False, runtime_name: Runtime = "local") -> None:
    """Train a model across simulated clients; write results.json, plot.png and run.json
    (the run directory `veil audit` reads), plus the privacy report with --report."""
    from veil.crypto.paillier import MIN_SECURE_BITS
    from veil.dp import Ledger
    from veil.experiments.fl_config import load_config
    from veil.fl import Federation, LocalRuntime

    if runtime_name not in RUNTIMES:
        raise ConfigError(f"--runtime {runtime_name!r} is not allowed: expected one of "
                          f"{', '.join(RUNTIMES)}")
    cfg = load_config(config)
    out_dir = out or Path(cfg["run"]["out"] or Path("fl_results") / config.stem)
    checkpoint, ledger_file = out_dir / "checkpoint.veil", out_dir / "ledger.sqlite"
    state_file = out_dir / "state.json"
    if not resume and (checkpoint.exists() or ledger_file.exists()):
        raise ConfigError(f"{out_dir} already holds a run: pass --resume to continue it, or "
                          "choose another --out (its ledger keeps the privacy budget spent)")
    seed = cfg["run"]["seed"]
    partition_seed, canary_seed = _seeds(state_file, seed, resume)

    clients, test = cfg.data(partition_seed)
    if cfg.kind == "hybrid" and cfg["hybrid"]["key_bits"] < MIN_SECURE_BITS:
        err_console.print(f"[yellow]warning:[/] an insecure {cfg['hybrid']['key_bits']}-bit "
                          "threshold key (insecure_ok = true): for tests and demos only")
    strategy = cfg.strategy(clients)
    rounds = cfg["training"]["rounds"]
    run_options = cfg["run"]
    flower = runtime_name == "flower-sim"
    with LocalRuntime(cfg.faults(), workers=1 if flower else run_options["workers"],
                      timeout=run_options["timeout"]) as runtime, Progress(
            TextColumn("[bold]federated rounds"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.description}"), TimeElapsedColumn(),
            console=err_console, transient=json_) as progress:
        task = progress.add_task("", total=rounds)

        def on_round(record: dict) -> None:
            eps = record.get("epsilon")
            progress.update(task, completed=record["round"] + 1, description=(
                f"acc {record.get('accuracy', float('nan')):.4f}"
                + ("" if eps is None else f"  eps {eps:.3f}")
                + ("" if record["status"] == "ok" else "  (aborted)")))

        federation = Federation(clients, cfg.model(), strategy, rounds, test=test,
                                runtime=runtime, checkpoint=checkpoint, rng=seed,
                                on_round=on_round)
        canaries = cfg.canaries(federation, rng=canary_seed)
        # the ledger file is created only once everything that can refuse the config has
        # run: a refused config leaves no trace that would block the next attempt
        os.makedirs(out_dir, exist_ok=True)
        state_file.write_text(json.dumps({"config": str(config), "partition_seed":
                                          partition_seed, "canary_seed": canary_seed.hex()}))
        ledger = None
        if cfg.has("privacy"):
            p = cfg["privacy"]
            ledger = federation.ledger = Ledger(p["epsilon"], p["delta"],
                                                accountant=p["accountant"], path=ledger_file)
        if flower:
            from veil.fl.runtime.flower import simulate

            history = simulate(federation, faults=cfg.faults(), timeout=run_options["timeout"],
                               resume=resume)
        else:
            history = federation.run(resume=resume)
    history.save_json(out_dir / "results.json")
    history.plot(out_dir / "plot.png", title=f"{config.stem}: {cfg['data']['dataset']}, "
                                             f"{len(clients)} clients")
    certified = None
    if ledger is not None:
        certified = ledger.spent()
        ledger.close()
    _write_run(out_dir, config.stem, cfg, history, canaries)
    bound = None
    if canaries is not None:
        bound = canaries.audit(delta=certified[1] if certified else 0.0,
                               confidence=cfg["audit"]["confidence"], rng=seed)
    html = None
    if report:
        from veil.audit import privacy_report

        confidence = cfg["audit"]["confidence"] if cfg.has("audit") else 0.95
        _, html = privacy_report(out_dir, confidence=confidence, rng=seed).write(
            out_dir / "audit")
    if json_:
        extra = {"out": str(out_dir)}
        if bound is not None:
            extra["audit"] = {**bound.to_dict(), "certified_epsilon":
                              certified[0] if certified else None}
        if html is not None:
            extra["report"] = str(html)
        print_json({**history.to_dict(), **extra})
        return
    print_table([["" if r.get(c) is None else r[c] for c in _COLUMNS] for r in history.rounds],
                list(_COLUMNS),
                title=f"veil fl run {config} -> {out_dir}")
    if bound is not None:
        lower = math.floor(bound.epsilon * 1000) / 1000  # a lower bound: never round up
        console.print(f"canary clients: epsilon >= {lower:g} at confidence "
                      f"{bound.confidence:g} ({bound.correct}/{bound.guesses} correct guesses "
                      f"of {bound.canaries} canaries); certified epsilon "
                      + ("none (no [privacy])" if certified is None else
                         f"{certified[0]:.3g}"))
    if html is not None:
        console.print(f"privacy report: {html}")


AppOut = Annotated[Path, typer.Option("--out", help="Directory to write the Flower app into.")]
Results = Annotated[Path | None, typer.Option(
    "--results", help="Where the ServerApp writes results.json (default <out>/results); a "
    "path on the SuperLink's machine.")]


@app.command("app")
def flower_app(config: Config, out: AppOut, results: Results = None) -> None:
    """Write a Flower app for CONFIG: submit it with `flwr run DIR CONNECTION` to a
    SuperLink whose SuperNodes run with --node-config "party-id=I" (needs veil[flower]
    on every machine)."""
    from veil.experiments.flower_app import write_app

    where = write_app(config, out, results)
    console.print(f"Flower app written to {where}: flwr run {where} <connection>")


Hosts = Annotated[list[str] | None, typer.Option(
    "--host", help="A DNS name or IP address of the SuperLink (repeat; default localhost "
    "and 127.0.0.1).")]


@app.command("certs")
def certs(directory: Annotated[Path, typer.Argument(help="Directory for ca.crt, server.crt "
                                                         "and server.key.")],
          host: Hosts = None) -> None:
    """Make a self-signed CA and a SuperLink certificate (TLS for a private deployment)."""
    from veil.fl.runtime.tls import self_signed

    paths = self_signed(directory, tuple(host) if host else ("localhost", "127.0.0.1"))
    print_table([[k, str(v)] for k, v in paths.items()], ["file", "path"], title="TLS files")
