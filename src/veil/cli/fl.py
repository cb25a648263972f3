"""``veil fl``: federated learning runs from a TOML configuration."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from veil.cli._output import err_console, print_json, print_table
from veil.errors import ConfigError

app = typer.Typer(help="Federated learning.", no_args_is_help=True)

_COLUMNS = ("round", "status", "accuracy", "loss", "epsilon", "aggregated", "bytes_up",
            "bytes_down", "time")


def _partition_seed(state_file: Path, seed: int | None, resume: bool) -> int:
    """The seed of the data split: the run's seed, or one drawn once and kept on disk so
    that a resumed run sees the same clients."""
    if seed is not None:
        return seed
    if resume and state_file.exists():
        return int(json.loads(state_file.read_text())["partition_seed"])
    from veil.random import secure_rng

    return int(secure_rng().randbits(62))


Config = Annotated[Path, typer.Argument(help="TOML file describing the run.")]
Resume = Annotated[bool, typer.Option("--resume",
                                      help="Continue an interrupted run from its checkpoint.")]
Out = Annotated[Path | None, typer.Option("--out", help="Output directory (default: run.out "
                                          "in the config, else fl_results/<config name>).")]
Json = Annotated[bool, typer.Option("--json", help="Print the results as JSON.")]


@app.command("run")
def run(config: Config, resume: Resume = False, out: Out = None, json_: Json = False) -> None:
    """Train a model across simulated clients; write results.json and plot.png."""
    from veil.dp import Ledger
    from veil.fl import Federation, LocalRuntime
    from veil.fl.config import load_config

    cfg = load_config(config)
    out_dir = out or Path(cfg["run"]["out"] or Path("fl_results") / config.stem)
    checkpoint, ledger_file = out_dir / "checkpoint.veil", out_dir / "ledger.sqlite"
    state_file = out_dir / "run.json"
    if not resume and (checkpoint.exists() or ledger_file.exists()):
        raise ConfigError(f"{out_dir} already holds a run: pass --resume to continue it, or "
                          "choose another --out (its ledger keeps the privacy budget spent)")
    os.makedirs(out_dir, exist_ok=True)
    seed = cfg["run"]["seed"]
    partition_seed = _partition_seed(state_file, seed, resume)
    state_file.write_text(json.dumps({"config": str(config), "partition_seed": partition_seed}))

    clients, test = cfg.data(partition_seed)
    strategy = cfg.strategy(clients)
    rounds = cfg["training"]["rounds"]
    ledger = None
    if cfg.has("privacy"):
        p = cfg["privacy"]
        ledger = Ledger(p["epsilon"], p["delta"], accountant=p["accountant"], path=ledger_file)
    with LocalRuntime(cfg.faults(), workers=cfg["run"]["workers"]) as runtime, Progress(
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
                                ledger=ledger, runtime=runtime, checkpoint=checkpoint,
                                rng=seed, on_round=on_round)
        history = federation.run(resume=resume)
    history.save_json(out_dir / "results.json")
    history.plot(out_dir / "plot.png", title=f"{config.stem}: {cfg['data']['dataset']}, "
                                             f"{len(clients)} clients")
    if ledger is not None:
        ledger.close()
    if json_:
        print_json({**history.to_dict(), "out": str(out_dir)})
        return
    print_table([["" if r.get(c) is None else r[c] for c in _COLUMNS] for r in history.rounds],
                list(_COLUMNS),
                title=f"veil fl run {config} -> {out_dir}")
