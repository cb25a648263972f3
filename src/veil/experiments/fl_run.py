"""One federated run from a configuration: the application service under ``veil fl run``.

:func:`run_federated` takes a parsed horizontal configuration
(:class:`~veil.experiments.fl_config.FLConfig`) and an output folder, runs the federation
and returns an :class:`FLRun`; the command parses flags, checks the folder and prints. The
folder holds what the run leaves:

* ``state.json`` -- the seeds of the data split and of the canary clients (drawn from
  secure randomness when ``[run] seed`` is absent, kept so that a resumed run sees the same
  clients) and the config's digest (a resumed run must be the run that started);
* ``ledger.sqlite`` -- the run's :class:`~veil.dp.Ledger`, built from the config's one
  :class:`~veil.dp.PrivacyBudget` (the budget the strategy's noise was calibrated for) and
  passed to the :class:`~veil.fl.Federation`; created only once nothing refused the
  config, removed again when the federation refuses it, so a refused config leaves no trace;
* ``checkpoint.veil`` -- the federation's write-ahead checkpoint (``resume``);
* ``results.json`` (rewritten after every round, so an interrupted run leaves the rounds it
  completed), ``plot.png``, ``run.json`` (the run directory ``veil audit`` reads),
  ``model.npz`` (:mod:`veil.learn.model_format`, with the certified spend) and, with ``report``,
  the privacy report in ``audit/``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veil._io import atomic_write
from veil._json import to_jsonable
from veil.errors import ConfigError
from veil.experiments.fl_config import FLConfig
from veil.random import secure_rng

__all__ = ["FLRun", "RunInterrupted", "run_federated"]

#: how messages move: this process (or [run] workers), or Flower's simulation engine
RUNTIMES = ("local", "flower-sim")


@dataclass(frozen=True)
class FLRun:
    """What a run produced: its folder, the history (rounds and final parameters), the
    saved model, the certified spend (``Spent``, None without ``[privacy]``), the canary
    audit's bound (None without ``[audit]``) and the privacy report's HTML page (None
    unless asked for)."""

    out: Path
    history: Any
    model_file: Path
    certified: Any
    audit: Any
    report: Path | None


class RunInterrupted(Exception):
    """Ctrl-C: ``rounds`` rounds were done and saved in ``out``/results.json; the run
    continues with ``resume=True``."""

    def __init__(self, out: Path, rounds: int) -> None:
        super().__init__(f"interrupted after {rounds} round(s), saved in {out}")
        self.out, self.rounds = out, rounds


def run_federated(cfg: FLConfig, out: Path, *, resume: bool = False, report: bool = False,
                  runtime: str = "local",
                  on_round: Callable[[dict[str, Any]], None] | None = None) -> FLRun:
    """Run ``cfg`` (a horizontal run: fedavg, dpfedavg or hybrid) into the folder ``out``
    (module docstring); ``resume`` continues it from its checkpoint. ``runtime``: one of
    :data:`RUNTIMES`. ``on_round(record)`` is called with each completed round's metrics.
    Raises :class:`RunInterrupted` on Ctrl-C, after saving the completed rounds."""
    from veil.fl import Federation, LocalRuntime

    if runtime not in RUNTIMES:
        raise ConfigError(f"runtime={runtime!r} is not allowed: expected one of "
                          f"{', '.join(RUNTIMES)}")
    if cfg.kind in ("vertical", "transfer"):
        raise ConfigError(f"{cfg.path}: a [{cfg.kind}] run is not a federation of horizontal "
                          "clients (veil.experiments.vertical_run)")
    checkpoint, ledger_file = out / "checkpoint.veil", out / "ledger.sqlite"
    state_file = out / "state.json"
    seed = cfg["run"]["seed"]
    settings = _settings(cfg)
    if resume:
        _settings_changed(state_file, settings)
    partition_seed, canary_seed = _seeds(state_file, seed, resume)
    clients, test, classes = cfg.data(partition_seed)
    strategy = cfg.strategy(clients)
    rounds = cfg["training"]["rounds"]
    options = cfg["run"]
    flower = runtime == "flower-sim"
    with LocalRuntime(cfg.faults(), workers=1 if flower else options["workers"],
                      timeout=options["timeout"]) as local:

        def progress(record: dict[str, Any]) -> None:
            # results for the completed rounds, whatever ends the run
            federation.history.save_json(out / "results.json")
            if on_round is not None:
                on_round(record)

        os.makedirs(out, exist_ok=True)
        ledger = _ledger(cfg.budget(), ledger_file)
        try:
            federation = Federation(clients, cfg.model(), strategy, rounds, test=test,
                                    runtime=local, checkpoint=checkpoint, rng=seed,
                                    classes=classes, on_progress=progress,
                                    simulate_noise=options["simulate_noise"], ledger=ledger)
            canaries = cfg.canaries(federation, rng=canary_seed)
        except BaseException:
            _drop_new_ledger(ledger, ledger_file, resume)
            raise
        atomic_write(state_file, json.dumps({"config": str(cfg.path), "partition_seed":
                                             partition_seed, "canary_seed": canary_seed.hex(),
                                             "settings": settings,
                                             "digest": _digest(settings)}))
        try:
            if flower:
                from veil.fl.runtime.flower import simulate

                history = simulate(federation, faults=cfg.faults(),
                                   timeout=options["timeout"], resume=resume)
            else:
                history = federation.run(resume=resume)
        except KeyboardInterrupt:
            federation.history.save_json(out / "results.json")
            raise RunInterrupted(out, len(federation.history.rounds)) from None
    history.save_json(out / "results.json")
    name = Path(cfg.path).stem
    history.plot(out / "plot.png", title=f"{name}: {cfg['data']['dataset']}, "
                                         f"{len(clients)} clients",
                 budget=ledger.epsilon if ledger is not None else None)
    certified = None
    if ledger is not None:
        certified = ledger.spent()
        ledger.close()
    _write_run(out, name, cfg, history, canaries)
    model_file = _save_model(out / "model.npz", cfg, federation.model, history, certified)
    bound = None
    if canaries is not None:
        bound = canaries.audit(delta=certified[1] if certified else 0.0,
                               confidence=cfg["audit"]["confidence"], rng=seed)
    html = None
    if report:
        from veil.audit import privacy_report

        confidence = cfg["audit"]["confidence"] if cfg.has("audit") else 0.95
        _, html = privacy_report(out, confidence=confidence, rng=seed).write(out / "audit")
    return FLRun(out, history, model_file, certified, bound, html)


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
    draw = secure_rng()
    return int(draw.randbits(62)), draw.bytes(32)


def _settings_changed(state_file: Path, settings: dict[str, Any]) -> None:
    """ConfigError naming what differs between ``settings`` and the run's stored config
    (a resumed run must be the run that started: other noise or data would be another run)."""
    if not state_file.exists():
        return
    stored = json.loads(state_file.read_text())
    if stored.get("digest") in (None, _digest(settings)):
        return
    old, new = stored.get("settings", {}), settings
    changed = [f"[{section}] {key}: {old.get(section, {}).get(key)!r} -> "
               f"{new.get(section, {}).get(key)!r}"
               for section in sorted(set(old) | set(new))
               for key in sorted(set(old.get(section, {})) | set(new.get(section, {})))
               if old.get(section, {}).get(key) != new.get(section, {}).get(key)]
    raise ConfigError("cannot resume: the config changed since the run started ("
                      + "; ".join(changed or ["its digest differs"]) + "); restore it, or "
                      "start a new run with another --out")


def _settings(cfg: FLConfig) -> dict[str, Any]:
    """The run's config as JSON values; ``[run] workers`` (speed only) left out."""
    settings = to_jsonable(cfg.sections)
    settings.get("run", {}).pop("workers", None)
    return json.loads(json.dumps(settings, sort_keys=True))


def _digest(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _ledger(budget: Any, path: Path) -> Any:
    """The run's ledger file for the config's budget (None without ``[privacy]``)."""
    from veil.dp import Ledger

    return None if budget is None else Ledger.for_budget(budget, path=path)


def _drop_new_ledger(ledger: Any, path: Path, resume: bool) -> None:
    """Close ``ledger`` and, when this run created it (not ``resume``), remove its file."""
    if ledger is None:
        return
    ledger.close()
    if not resume:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def _write_run(out_dir: Path, name: str, cfg: FLConfig, history: Any, canaries: Any) -> Path:
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


def _save_model(path: Path, cfg: FLConfig, model: Any, history: Any,
                certified: tuple[float, float] | None) -> Path:
    """The trained model in veil's model format (:mod:`veil.learn.model_format`), with the
    encoding of its data set's raw columns, the class labels and the certified spend."""
    from veil.datasets.tabular import class_names, feature_encoding
    from veil.learn.model_format import encoded_names, save_model

    name, bounds = cfg["data"]["dataset"], cfg.bounds()
    # the run scaled its raw features by the declared bounds ([data] bounds)
    encoding = feature_encoding(name) if bounds is None else bounds.encoding()
    model.set_params_vector(history.params)
    return save_model(path, model, feature_names=encoded_names(encoding), encoding=encoding,
                      labels=class_names(name), dataset=name, kind=cfg.kind,
                      epsilon=certified[0] if certified else None,
                      delta=certified[1] if certified else None,
                      ledger="ledger.sqlite" if certified else None,
                      rounds=len(history.rounds))
