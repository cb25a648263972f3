"""``veil fl``: federated learning runs from a TOML configuration."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from veil._io import atomic_write
from veil.cli._output import (
    check_input_file,
    check_new_files,
    check_out_dir,
    err_console,
    print_json,
    print_table,
    progress,
    say,
    say_replaced,
    warn,
)
from veil.errors import ConfigError

app = typer.Typer(help="Federated learning.", no_args_is_help=True)

#: the most parties a command makes files for (--parties, --party)
MAX_PARTIES = 10_000

_COLUMNS = ("round", "status", "accuracy", "loss", "epsilon", "aggregated", "bytes_up",
            "bytes_down", "time")


def _cell(record: dict, column: str) -> object:
    value = record.get(column)
    if value is None:
        return ""
    if column == "time":
        return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
    return f"{value:.4g}" if isinstance(value, float) else value


Config = Annotated[Path, typer.Argument(help="TOML file describing the run.")]
Resume = Annotated[bool, typer.Option("--resume",
                                      help="Continue an interrupted run from its checkpoint.")]
Out = Annotated[Path | None, typer.Option("--out", help="Output directory, new or empty "
                                          "(default: run.out in the config, else "
                                          "fl_results/<config name>).")]
Force = Annotated[bool, typer.Option("--force", help="Write into a non-empty output directory "
                                     "(never over a run's ledgers).")]
Json = Annotated[bool, typer.Option("--json", help="Print the results as JSON.")]
Report = Annotated[bool, typer.Option("--report", help="Also write the privacy report "
                                      "(report.json, report.html) into <out>/audit.")]
Runtime = Annotated[str, typer.Option("--runtime", help="How messages move: 'local' (this "
                                      "process, or [run] workers) or 'flower-sim' (Flower's "
                                      "simulation engine, one virtual node and 1 CPU per client;"
                                      " a [vertical] run: per party and the arbiter; needs "
                                      "veil[flower]).")]


@app.command("run")
def run(config: Config, resume: Resume = False, out: Out = None, json_: Json = False,
        report: Report = False, force: Force = False, runtime_name: Runtime = "local") -> None:
    """Train a model across simulated clients; write results.json, plot.png and run.json
    (the run directory `veil audit` reads), plus the privacy report with --report."""
    from veil.crypto.paillier import MIN_SECURE_BITS
    from veil.experiments.fl_config import load_config
    from veil.experiments.fl_run import RUNTIMES, RunInterrupted, run_federated

    if runtime_name not in RUNTIMES:
        raise ConfigError(f"--runtime {runtime_name!r} is not allowed: expected one of "
                          f"{', '.join(RUNTIMES)}")
    cfg = load_config(check_input_file(config, "CONFIG", text=True))
    if cfg.has("secagg") and cfg["secagg"]["identities"]:
        raise ConfigError(f"[secagg] identities = {cfg['secagg']['identities']!r} names a "
                          "deployment's identity table, whose private keys stay on the "
                          "clients' own nodes: `veil fl run` simulates every client here and "
                          "holds none of them. Deploy this config with `veil fl app`, or drop "
                          "`identities` to simulate (the run then makes the identities)")
    if cfg.kind in ("vertical", "transfer"):
        for flag, given in (("--resume", resume), ("--report", report)):
            if given:
                raise ConfigError(f"{flag} is not allowed for a [{cfg.kind}] run (it runs "
                                  "once, in this process)")
        _run_vertical(cfg, config, out, json_, force, flower=runtime_name == "flower-sim")
        return
    out_dir = out or Path(cfg["run"]["out"] or Path("fl_results") / config.stem)
    _check_run_dir(out_dir, resume, force)
    if cfg.kind == "hybrid" and cfg["hybrid"]["key_bits"] < MIN_SECURE_BITS:
        warn(f"an insecure {cfg['hybrid']['key_bits']}-bit threshold key (insecure_ok = true): "
             "for tests and demos only")
    with progress("federated rounds", total=cfg["training"]["rounds"],
                  transient=json_) as update:

        def on_round(record: dict) -> None:
            eps = record.get("epsilon")
            update(record["round"] + 1, what=(
                f"acc {record.get('accuracy', float('nan')):.4f}"
                + ("" if eps is None else f"  eps {eps:.3f}")
                + ("" if record["status"] == "ok" else "  (aborted)")))

        try:
            result = run_federated(cfg, out_dir, resume=resume, report=report,
                                   runtime=runtime_name, on_round=on_round)
        except RunInterrupted as stop:
            err_console.print(f"interrupted: {stop.rounds} round(s) done and saved in "
                              f"{out_dir / 'results.json'}; continue with\n  veil fl run "
                              f"{config} --out {out_dir} --resume")
            raise typer.Exit(130) from None
    history, certified, bound = result.history, result.certified, result.audit
    if json_:
        extra = {"out": str(out_dir), "model": str(result.model_file)}
        if bound is not None:
            extra["audit"] = {**bound.to_dict(), "certified_epsilon":
                              certified[0] if certified else None}
        if result.report is not None:
            extra["report"] = str(result.report)
        print_json({**history.to_dict(), **extra})
        return
    print_table([[_cell(r, c) for c in _COLUMNS] for r in history.rounds],
                [c.replace("_", " ") for c in _COLUMNS],
                title=f"veil fl run {config} -> {out_dir}")
    if bound is not None:
        from veil.audit.report import round_bound

        say(f"canary clients: epsilon >= {round_bound(bound.epsilon, False)} at confidence "
            f"{bound.confidence:g} "
            f"({bound.correct}/{bound.guesses} correct guesses of {bound.canaries} canaries); "
            "certified epsilon " + ("none (no [privacy])" if certified is None else
                                    round_bound(certified[0], True)))
    say(f"model: {result.model_file} (veil predict {result.model_file} DATA.csv)")
    if result.report is not None:
        say(f"privacy report: {result.report}")


def _check_run_dir(out_dir: Path, resume: bool, force: bool) -> None:
    """--out for a new run (no run in it; empty unless --force) or for --resume (a run)."""
    checkpoint, ledger_file = out_dir / "checkpoint.veil", out_dir / "ledger.sqlite"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out={str(out_dir)!r} is an existing file; expected a folder")
    if not resume and (checkpoint.exists() or ledger_file.exists()):
        raise ConfigError(f"{out_dir} already holds a run: pass --resume to continue it, or "
                          "choose another --out (its ledger keeps the privacy budget spent)")
    if resume and not any(f.exists() for f in (checkpoint, ledger_file,
                                               out_dir / "state.json")):
        raise ConfigError(f"--resume: {out_dir} holds no run to resume (no checkpoint.veil, "
                          "ledger.sqlite or state.json); drop --resume to start one")
    if not resume:
        check_out_dir(out_dir, force=force)


def _total(counts: Any) -> int:
    """The sum of the byte counts in nested dicts and lists."""
    if isinstance(counts, dict):
        counts = list(counts.values())
    return sum(map(_total, counts)) if isinstance(counts, list) else int(counts)


def _run_vertical(cfg: Any, config: Path, out: Path | None, json_: bool, force: bool,
                  flower: bool = False) -> None:
    """A ``[vertical]`` or ``[transfer]`` run (:mod:`veil.experiments.vertical_run`): results.json,
    run.json (the run directory `veil audit` reads) and the ledgers of the parties that
    spend privacy budget, in the output folder. Relative paths in the section are read from
    the config file's folder. ``flower``: a [vertical] run on Flower's simulation engine
    (:func:`veil.fl.runtime.flower_vertical.simulate`; each party's coefficient block in
    ``<out>/<party>/coef.npy``), or a [transfer] run's federated fine-tuning there."""
    import functools
    import time

    from veil._json import to_jsonable
    from veil.audit import Run, RunRecord, write_run
    from veil.experiments.vertical_run import run_transfer, run_vertical

    kind = cfg.kind
    out_dir = check_out_dir(out or Path(cfg["run"]["out"] or Path("fl_results") / config.stem),
                            force=force, keep=("ledger*.sqlite",))
    os.makedirs(out_dir, exist_ok=True)
    runner = functools.partial(run_transfer if kind == "transfer" else run_vertical,
                               flower=flower)
    start = time.perf_counter()
    with err_console.status(f"{kind} run {config}", spinner="dots"):
        results = to_jsonable(runner(cfg[kind], base=config.resolve().parent, out=out_dir))
    results["seconds"] = time.perf_counter() - start
    atomic_write(out_dir / "results.json", json.dumps(results, indent=2))
    scalars = {k: v for k, v in results.items() if isinstance(v, int | float)
               and not isinstance(v, bool)}
    accuracy = results.get("accuracy", results.get("accuracy_with_source"))
    ledger = out_dir / "ledger.sqlite"
    record = RunRecord(label=config.stem, accuracy=accuracy,
                       ledger=ledger.name if ledger.exists() else None,
                       metrics={k: v for k, v in scalars.items() if k != "accuracy"},
                       cost={"seconds": results["seconds"],
                             "bytes": _total(results.get("psi_bytes", 0))
                             + _total(results.get("bytes_per_epoch", 0))
                             + _total(results.get("bytes", 0))
                             + _total(results.get("bytes_sent", 0))})
    write_run(out_dir, Run(name=config.stem, kind="other", records=[record]))
    if json_:
        print_json({**results, "out": str(out_dir)})
        return
    print_table([[k, f"{v:.4g}" if isinstance(v, float) else v] for k, v in scalars.items()],
                ["result", "value"], title=f"veil fl run {config} ({kind}) -> {out_dir}")


AppOut = Annotated[Path, typer.Option("--out", help="Directory to write the Flower app into "
                                       "(new or empty).")]
Results = Annotated[Path | None, typer.Option(
    "--results", help="Where the ServerApp writes results.json (default <out>/results); a "
    "path on the SuperLink's machine.")]


Setup = Annotated[Path | None, typer.Option(
    "--setup", help="Hybrid runs: the public set-up (public.bin) that `veil fl deal` wrote.")]


@app.command("app")
def flower_app(config: Config, out: AppOut, results: Results = None,
               setup: Setup = None, force: Force = False) -> None:
    """Write a Flower app for CONFIG: submit it with `flwr run DIR CONNECTION` to a
    SuperLink whose SuperNodes each run with --node-config node.toml (party-id, plans,
    data, ledger, key-share, identity, identity-key; a [vertical] run: party, plans, data,
    ledger, out, and one node with party = "arbiter"; needs veil[flower] on every
    machine)."""
    from veil.experiments.fl_config import load_config
    from veil.experiments.flower_app import write_app

    check_out_dir(out, force=force)
    if load_config(check_input_file(config, "CONFIG", text=True)).kind == "vertical":
        if setup is not None:
            raise ConfigError("--setup is for hybrid runs; a [vertical] run has none")
        from veil.experiments.flower_vertical_app import vertical_app

        where = vertical_app(config, out, results)
    else:
        where = write_app(config, out, results, setup)
    say(f"Flower app written to {where}: veil fl submit {where} <connection>")


DealOut = Annotated[Path, typer.Option("--out", help="Directory for public.bin and each "
                                       "party's party-I.key and party-I.id.")]


@app.command("deal")
def deal(config: Config, out: DealOut, force: ForceKeys = False) -> None:
    """The hybrid approach's dealer, run on its own: make the threshold key and the
    parties' identities for CONFIG; hand party I its party-I.key and party-I.id (private),
    everyone public.bin; then delete the party files here."""
    from veil.experiments.fl_config import load_config
    from veil.fl.hybrid.setup import deal as deal_keys

    cfg = load_config(check_input_file(config, "CONFIG", text=True))
    if cfg.kind != "hybrid":
        raise ConfigError(f"{config}: veil fl deal is for hybrid runs ([training] strategy = "
                          f"\"hybrid\"); this run is {cfg.kind}")
    h, trust = cfg["hybrid"], cfg.trust()
    replaced = check_new_files([out / "public.bin"] + [
        out / f"party-{i}.{ext}" for i in range(trust.parties) for ext in ("key", "id")],
        force=force)
    setup = deal_keys(trust, out, bits=h["key_bits"], insecure_ok=h["insecure_ok"],
                      keygen=h["keygen"], force=force)
    print_table([["public.bin", "everyone (the aggregator too)"]] +
                [[f"party-{i}.key, party-{i}.id", f"party {i} only"]
                 for i in range(trust.parties)], ["file", "goes to"],
                title=f"veil fl deal -> {out} (set-up {setup.fingerprint[:16]})")
    say(f"parties {trust.parties}, honest {trust.honest}, threshold {trust.threshold} "
        "(partial decryptions needed)")
    say_replaced(replaced)


@app.command("split")
def split(config: Config, out: Annotated[Path, typer.Option(
        "--out", help="Directory for party-I.npz, new or empty.")], force: Force = False
          ) -> None:
    """Write each party's share of CONFIG's data set (under [run] seed) as party-I.npz:
    the data files of a demo deployment's nodes (raw records; each node scales its own by
    the plan's [data] bounds)."""
    from veil.experiments.flower_app import write_party_data

    check_input_file(config, "CONFIG", text=True)
    paths = write_party_data(config, check_out_dir(out, force=force))
    say(f"{len(paths)} data files written to {out}")


Hosts = Annotated[list[str] | None, typer.Option(
    "--host", help="A DNS name or IP address of the SuperLink (repeat; default localhost "
    "and 127.0.0.1).")]


ForceKeys = Annotated[bool, typer.Option("--force", help="Replace existing key or set-up "
                                          "files (each replaced one is named).")]


@app.command("certs")
def certs(directory: Annotated[Path, typer.Argument(help="Directory for ca.crt, server.crt "
                                                         "and server.key.")],
          host: Hosts = None, force: ForceKeys = False) -> None:
    """Make a self-signed CA and a SuperLink certificate (TLS for a private deployment)."""
    from veil.fl.runtime.tls import self_signed

    replaced = check_new_files([Path(directory) / f for f in ("ca.crt", "server.crt",
                                                               "server.key")],
                               force=force, option="DIRECTORY")
    paths = self_signed(directory, tuple(host) if host else ("localhost", "127.0.0.1"),
                        force=force)
    print_table([[k, str(v)] for k, v in paths.items()], ["file", "path"], title="TLS files")
    say_replaced(replaced)


@app.command("identities")
def identities(directory: Annotated[Path, typer.Argument(help="Directory for the key files.")],
               parties: Annotated[int, typer.Option("--parties", help="Number of parties.")],
               force: ForceKeys = False) -> None:
    """Make the parties' Ed25519 identity keys for SecAgg on a deployment: identity-<i>.key
    (move it to party i's machine only: --node-config "party-id=i identity-key='PATH'") and
    identities.json, the table every party and the server read ([secagg] identities)."""
    from veil._validation import check_int
    from veil.crypto.identity import write_identities

    check_int(parties, "--parties", low=1, high=MAX_PARTIES)
    keys = [Path(directory) / f"identity-{i}.key" for i in range(parties)]
    replaced = check_new_files([*keys, Path(directory) / "identities.json"], force=force,
                               option="DIRECTORY")
    table = write_identities(directory, parties, force=force)
    print_table([*([str(i), str(k)] for i, k in enumerate(keys)), ["table", str(table)]],
                ["party", "file"], title="identity keys")
    say_replaced(replaced)


PartyIndex = Annotated[int, typer.Option("--party", help="This party's index (0-based).")]
KeyShare = Annotated[Path, typer.Option("--key-share", help="A key-share file (veil keygen "
                                        "or veil fl deal: party-I.key).")]
InsecureOk = Annotated[bool, typer.Option("--insecure-ok", help="Allow keys under 2048 "
                                          "bits (tests and demos).")]


@app.command("identity")
def own_identity(party: PartyIndex, out: Annotated[Path, typer.Option(
        "--out", help="Directory for identity-I.key and identity-I.json.")],
        force: ForceKeys = False) -> None:
    """Make this party's own Ed25519 identity key, with no dealer: identity-I.key (private,
    0600: stays on this machine) and identity-I.json (its public key: publish it to the
    other parties and the aggregator)."""
    from veil._validation import check_int
    from veil.crypto.identity import read_table, write_identity

    check_int(party, "--party", low=0, high=MAX_PARTIES - 1)
    replaced = check_new_files([out / f"identity-{party}.{ext}" for ext in ("key", "json")],
                               force=force)
    key, table = write_identity(out, party, force=force)
    print_table([[str(key), "this party only"], [str(table), "everyone"],
                 ["public key", read_table(table)[party].hex()]], ["file", "goes to"],
                title=f"identity of party {party}")
    say_replaced(replaced)


@app.command("setup")
def public_setup(key_share: KeyShare, identities: Annotated[list[Path], typer.Option(
        "--identities", help="Identity tables (repeat): each party's identity-I.json, or "
        "one identities.json.")], out: Annotated[Path, typer.Option(
            "--out", help="The public set-up to write (public.bin).")],
        insecure_ok: InsecureOk = False, force: ForceKeys = False) -> None:
    """Dealer-free hybrid set-up: write public.bin from the threshold public key inside
    KEY-SHARE (only its public part: no share goes into public.bin) and the parties'
    published identity keys. Every party can run it with its own share file and compare
    the fingerprint."""
    from veil.fl.hybrid.setup import assemble

    replaced = check_new_files([out], force=force)
    setup = assemble(key_share, identities, out, insecure_ok=insecure_ok)
    say_replaced(replaced)
    say(f"public set-up written to {out} (key {setup.public_key.fingerprint.hex()[:16]}, "
        f"{len(setup.identities)} parties): fingerprint {setup.fingerprint}")


@app.command("enrol")
def enrol(party: PartyIndex, key_share: KeyShare,
          identity_key: Annotated[Path, typer.Option(
              "--identity-key", help="This party's identity-I.key (veil fl identity).")],
          setup: Annotated[Path, typer.Option(
              "--setup", help="This party's own copy of public.bin (veil fl setup).")],
          out: Annotated[Path, typer.Option("--out", help="The party-I.id file to write.")],
          identities: Annotated[list[Path], typer.Option(
              "--identities", help="The identity tables this party holds (repeat): every "
              "party's published identity-I.json, or one identities.json.")],
          insecure_ok: InsecureOk = False, force: ForceKeys = False) -> None:
    """Dealer-free hybrid set-up, on party I's machine: check its key share and identity
    key, and every party's identity key, against its own public.bin and write party-I.id
    (0600), which its node config names (identity = ...)."""
    from veil.fl.hybrid.setup import enrol as enrol_party

    replaced = check_new_files([out], force=force)
    ident = enrol_party(party, key_share, identity_key, setup, out, identities=identities,
                        insecure_ok=insecure_ok, force=force)
    say_replaced(replaced)
    say(f"party {party}'s identity written to {out} (set-up {ident.setup.fingerprint[:16]})")


@app.command("submit")
def submit(app_dir: Annotated[Path, typer.Argument(help="The app folder (veil fl app --out).")],
           connection: Annotated[str | None, typer.Argument(
               help="A SuperLink connection of $FLWR_HOME/config.toml (default: its "
               "default).")] = None,
           timeout: Annotated[float | None, typer.Option(
               "--timeout", help="Seconds to wait for the run (then it is stopped).")] = None,
           ) -> None:
    """Submit a Flower app (flwr run APP CONNECTION --stream), show its log, and exit 1
    unless the SuperLink records the run as completed: `flwr run` itself exits 0 whatever
    became of the run. A failure names the party and the stage."""
    from veil.cli._output import print_error
    from veil.errors import ProtocolError
    from veil.experiments.flower_app import submit as submit_app

    if timeout is not None:
        from veil._validation import check_positive

        check_positive(timeout, "--timeout")
    if not (app_dir / "pyproject.toml").is_file():
        raise ConfigError(f"APP_DIR={str(app_dir)!r} is not allowed: it holds no "
                          "pyproject.toml; expected a Flower app folder (veil fl app --out)")
    try:
        submit_app(app_dir, connection, timeout=timeout, echo=say)
    except ProtocolError as exc:
        print_error(str(exc))
        raise typer.Exit(1) from None
