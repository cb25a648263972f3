"""A vertical or transfer-learning run from a configuration (a TOML section as a dict).

``run_vertical(config)`` takes the ``[vertical]`` section: each party's CSV table, the id
column and the label column; it checks the tables (the label held by exactly one party,
no feature column at two parties, ids of one type without duplicates), aligns the rows by
PSI, trains the model and returns a dict of results::

    [vertical]
    model = "logistic"          # "logistic", "linear" or "split"
    protocol = "paillier"       # logistic / linear: "paillier" or "ss"
    id = "id"                   # the id column of every table
    label = "y"                 # the label column (in exactly one table)
    parties = { guest = "guest.csv", host = "host.csv" }   # name -> CSV path
    # or UCI Adult split by attributes (veil.fl.vertical.data.vertical_adult):
    # dataset = "adult"; parties = 3; overlap = 0.8; rows = 5000
    epochs = 10
    batch_size = 256
    learning_rate = 0.15
    alpha = 0.0                 # L2 penalty (logistic / linear)
    optimizer = "sgd"           # or "rmsprop" (paillier)
    link = "taylor2"            # paillier logistic, one host: or "cubic" (third order)
    key_bits = 2048             # paillier
    insecure_ok = false         # paillier: true allows keys under 2048 bits (tests, demos)
    decryption = "arbiter"      # paillier: "arbiter" (holds the key) or "threshold"
    test_fraction = 0.2         # aligned rows held out for the metrics (0: report on train)
    seed = 0                    # simulation randomness (data split, batches); omit: secure
    label_epsilon = 1.0         # optional label DP (paillier logistic, split), with
    label_delta = 1e-5          #   a fresh ledger of that budget for the label holder
    epsilon = 1.0               # or: noisy gradients (ss logistic), every party's rows
    delta = 1e-5                #   clipped to clip (one bound or one per party), a fresh
    clip = 1.0                  #   ledger of that budget for every party
    prefix_columns = false      # true: column names are local to each party ("x0" at the
                                #   guest and at the host are different features), so they
                                #   are read as "guest.x0", "host.x0"; false: a name at two
                                #   parties is refused as an overlap

Every key is checked (name and type) by :func:`check_section` before anything is read or
spent: a bad one is a :class:`~veil.errors.ConfigError` naming it. ``out``: the folder for
the parties' ledgers (``ledger.sqlite``, the guest's), None: ledgers in memory.

``run_transfer(config)`` takes the ``[transfer]`` section (source, targets, transfer and
test CSVs with a label column; see :mod:`veil.fl.vertical.transfer`).
Relative paths are resolved against ``base`` (the directory of the TOML file).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil._validation import check_choice, check_epsilon, check_probability
from veil.errors import ConfigError, DataError
from veil.fl.vertical.align import align, read_ids
from veil.random import check_rng

__all__ = ["run_vertical", "run_transfer", "check_tables", "check_section", "held_out",
           "schedule", "SECTIONS"]

log = logging.getLogger(__name__)

_NUM = (int, float)
#: the settings of each section -> their allowed types
SECTIONS: dict[str, dict[str, tuple[type, ...]]] = {
    "vertical": {"model": (str,), "protocol": (str,), "id": (str,), "label": (str,),
                 "parties": (dict, int), "dataset": (str,), "overlap": _NUM, "rows": (int,),
                 "epochs": (int,), "batch_size": (int,), "learning_rate": _NUM,
                 "alpha": _NUM, "optimizer": (str,), "link": (str,), "key_bits": (int,),
                 "test_fraction": _NUM, "seed": (int,), "label_epsilon": _NUM,
                 "label_delta": _NUM, "epsilon": _NUM, "delta": _NUM,
                 "clip": (int, float, list), "hidden": (int,), "embedding": (int,),
                 "prefix_columns": (bool,), "decryption": (str,), "insecure_ok": (bool,)},
    "transfer": {"label": (str,), "source": (str,), "targets": (list,), "transfer": (str,),
                 "test": (str,), "teachers": (int,), "noise_multiplier": _NUM,
                 "epsilon": _NUM, "delta": _NUM, "max_queries": (int,), "rounds": (int,),
                 "local_epochs": (int,), "learning_rate": _NUM, "hidden": (int,),
                 "source_epochs": (int,), "seed": (int,)},
}


def check_section(config: Any, section: str) -> dict:
    """``config`` as the ``[section]`` table: a ConfigError names an unknown key or a value
    of the wrong type (a bool is not a number)."""
    allowed = SECTIONS[section]
    if not isinstance(config, dict):
        raise ConfigError(f"[{section}] must be a table of settings")
    unknown = sorted(set(config) - set(allowed))
    if unknown:
        raise ConfigError(f"[{section}] has unknown settings {unknown}; allowed: "
                          f"{sorted(allowed)}")
    for key, value in config.items():
        kinds = allowed[key]
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise ConfigError(f"[{section}] {key}={value!r} is not allowed: expected "
                              f"{' or '.join(k.__name__ for k in kinds)}")
    return config


def _read(path: Any, base: Path, what: str) -> pd.DataFrame:
    file = Path(str(path))
    file = file if file.is_absolute() else base / file
    if not file.is_file():
        raise DataError(f"{what}: {str(file)!r} is not a file")
    return pd.read_csv(file)


def check_tables(tables: dict[str, pd.DataFrame], id_column: str, label: str) -> str:
    """Refuse tables that cannot be joined vertically; returns the label holder's name.

    Checks: every table has the id column (ids of one type, no duplicates, no missing
    ones); the label is in exactly one table; no other column is in two tables.
    """
    if len(tables) < 2:
        raise ConfigError(f"vertical learning needs at least two parties; got {list(tables)}")
    kinds = {}
    for name, table in tables.items():
        kinds[name] = read_ids(table, id_column, name=f"ids of {name!r}")[1]
    if len(set(kinds.values())) > 1:
        raise DataError(f"mismatched id types across parties: {kinds}; convert the "
                        f"{id_column!r} columns to one type")
    holders = [name for name, t in tables.items() if label in t.columns]
    if len(holders) != 1:
        raise ConfigError(f"the label {label!r} is held by {holders or 'no party'}; exactly "
                          "one party (the guest) must hold it")
    owner: dict[str, str] = {}
    for name, table in tables.items():
        for col in table.columns:
            if col in (id_column, label):
                continue
            if col in owner:
                raise ConfigError(f"column {col!r} is held by both {owner[col]!r} and "
                                  f"{name!r}: a vertical split gives each feature to one "
                                  "party (rename or drop one)")
            owner[col] = name
        if not [c for c in table.columns if c not in (id_column, label)]:
            raise DataError(f"party {name!r} holds no feature column")
    return holders[0]


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score)) if len(np.unique(y)) == 2 else float("nan")


def _tables(cfg: dict, base: Path, id_column: str, label: str, rng: Any
            ) -> dict[str, pd.DataFrame]:
    """The parties' tables: CSV files, or Adult split by ``dataset = "adult"``."""
    parties = cfg.get("parties")
    dataset = cfg.get("dataset")
    if dataset is not None:
        from veil.fl.vertical.data import vertical_adult

        check_choice(dataset, "[vertical] dataset", ("adult",))
        if not isinstance(parties, int) or parties < 2:
            raise ConfigError(f"[vertical] parties={parties!r} is not allowed: with dataset, "
                              "the number of parties (an integer >= 2)")
        if id_column != "id":
            raise ConfigError(f"[vertical] id={id_column!r} is not allowed with dataset: its "
                              "tables have the id column 'id'")
        overlap = check_probability(cfg.get("overlap", 0.8), "[vertical] overlap",
                                    low_open=True)
        return vertical_adult(parties, overlap=overlap, rows=cfg.get("rows"), label=label,
                              rng=rng)
    for key in ("overlap", "rows"):
        if key in cfg:
            raise ConfigError(f"[vertical] {key} applies to dataset = \"adult\" only; "
                              "CSV parties come as they are")
    if not isinstance(parties, dict) or len(parties) < 2:
        raise ConfigError("[vertical] parties must map at least two party names to CSV "
                          "paths (or be a number of parties with dataset = \"adult\")")
    return {str(k): _read(v, base, f"parties.{k}") for k, v in parties.items()}


def _ledger(out: str | Path | None, name: str, guest: str, epsilon: float, delta: float,
            accountant: str) -> Any:
    """Party ``name``'s fresh ledger of that budget: ``out/ledger.sqlite`` for the guest,
    ``out/ledger_<name>.sqlite`` for a host (None: in memory)."""
    from veil.dp import Ledger

    path = None
    if out is not None:
        if name != guest and not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ConfigError(f"party name {name!r} is not allowed with a persisted ledger: "
                              "letters, digits, '_' and '-' only")
        path = Path(out) / ("ledger.sqlite" if name == guest else f"ledger_{name}.sqlite")
    return Ledger(epsilon=epsilon, delta=delta, accountant=accountant, path=path)


def schedule(cfg: dict) -> dict[str, Any]:
    """The training schedule of a logistic / linear run (the section's defaults filled
    in): the arguments of :class:`veil.fl.vertical.paillier_lr.Plan` but the task."""
    return {"epochs": cfg.get("epochs", 10), "batch_size": cfg.get("batch_size", 256),
            "learning_rate": cfg.get("learning_rate", 0.15), "alpha": cfg.get("alpha", 0.0),
            "optimizer": cfg.get("optimizer", "sgd"), "link": cfg.get("link", "taylor2")}


def held_out(n: int, test_fraction: float, rng: Any) -> np.ndarray:
    """The aligned rows held out for the metrics: a mask of ``round(test_fraction n)``
    rows drawn by ``rng`` (all False when test_fraction is 0)."""
    test = np.zeros(n, dtype=bool)
    if test_fraction:
        test[rng.permutation(n)[: int(round(test_fraction * n))]] = True
    return test


def run_vertical(config: dict, *, base: str | Path = ".", out: str | Path | None = None
                 ) -> dict[str, Any]:
    """The ``[vertical]`` section -> results (see the module docstring)."""
    cfg = check_section(config, "vertical")
    model_kind = check_choice(cfg.get("model", "logistic"), "[vertical] model",
                              ("logistic", "linear", "split"))
    id_column, label = cfg.get("id", "id"), cfg.get("label", "y")
    test_fraction = check_probability(cfg.get("test_fraction", 0.0),
                                      "[vertical] test_fraction", high_open=True)
    label_epsilon = cfg.get("label_epsilon")
    if label_epsilon is not None:
        check_epsilon(label_epsilon, "[vertical] label_epsilon")
    epsilon = cfg.get("epsilon")
    if epsilon is not None:
        check_epsilon(epsilon, "[vertical] epsilon")
        if label_epsilon is not None:
            raise ConfigError("[vertical] epsilon (noisy gradients, protocol \"ss\") and "
                              "label_epsilon (protocol \"paillier\", split) exclude each other")
    rng = check_rng(cfg.get("seed"))
    tables = _tables(cfg, Path(base), id_column, label, rng)
    if cfg.get("prefix_columns", False):
        tables = {k: t.rename(columns={c: f"{k}.{c}" for c in t.columns
                                       if c not in (id_column, label)})
                  for k, t in tables.items()}
    guest = check_tables(tables, id_column, label)
    hosts = [n for n in tables if n != guest]
    alignment = align(tables[guest], {h: tables[h] for h in hosts},
                      column=id_column)             # PSI keys: the CSPRNG, whatever the seed
    ordered = [guest, *hosts]
    frames = [alignment.take("guest" if n == guest else n, tables[n]) for n in ordered]
    y = frames[0][label].to_numpy()
    blocks = [f.drop(columns=[c for c in (id_column, label) if c in f.columns])
              .to_numpy(dtype=np.float64) for f in frames]
    test = held_out(y.size, test_fraction, rng)
    train_blocks, test_blocks = [b[~test] for b in blocks], [b[test] if test.any() else b[~test]
                                                             for b in blocks]
    y_train, y_test = y[~test], (y[test] if test.any() else y[~test])
    ledger, ledgers = None, None
    if label_epsilon is not None:
        ledger = _ledger(out, guest, guest, label_epsilon, cfg.get("label_delta", 1e-5),
                         "rdp" if model_kind != "split" else "pld")
    if epsilon is not None:
        ledgers = [_ledger(out, name, guest, epsilon, cfg.get("delta", 1e-5), "rdp")
                   for name in ordered]
    results: dict[str, Any] = {"aligned": alignment.size, "psi_bytes": alignment.bytes,
                               "parties": ordered, "guest": guest}
    if model_kind == "split":
        from veil.fl.vertical.split import SplitNN

        model = SplitNN(learning_rate=cfg.get("learning_rate", 1e-3),
                        hidden=cfg.get("hidden", 64), embedding=cfg.get("embedding", 16),
                        label_epsilon=label_epsilon, ledger=ledger, random_state=rng.spawn(1)[0],
                        epochs=cfg.get("epochs", 10), batch_size=cfg.get("batch_size", 256))
        model.fit(train_blocks, y_train.astype(np.int64))
        results["bytes"] = model.bytes_
        results["accuracy"] = model.score(test_blocks, y_test)
        if len(model.classes_) == 2:
            results["auc"] = _auc(y_test, model.predict_proba(test_blocks)[:, 1])
    else:
        from veil.fl.vertical.linear import VerticalLinearRegression, VerticalLogisticRegression

        cls = VerticalLogisticRegression if model_kind == "logistic" else \
            VerticalLinearRegression
        model = cls(cfg.get("protocol", "paillier"), key_bits=cfg.get("key_bits", 2048),
                    insecure_ok=cfg.get("insecure_ok", False),
                    decryption=cfg.get("decryption", "arbiter"), label_epsilon=label_epsilon,
                    label_delta=cfg.get("label_delta", 1e-5), ledger=ledger,
                    epsilon=epsilon, delta=cfg.get("delta", 1e-5), clip=cfg.get("clip", 1.0),
                    ledgers=ledgers, random_state=rng.spawn(1)[0], **schedule(cfg))
        model.fit(train_blocks, y_train)
        results["seconds_per_epoch"] = model.stats_.seconds
        results["bytes_per_epoch"] = model.stats_.bytes
        if model_kind == "logistic":
            results["accuracy"] = model.score(test_blocks, y_test)
            results["auc"] = _auc(y_test, model.decision_function(test_blocks))
        else:
            results["r2"] = model.score(test_blocks, y_test)
    if ledger is not None:
        results["label_epsilon_spent"] = ledger.spent()[0]
    if ledgers is not None:
        results["epsilon_spent"] = {n: lg.spent()[0] for n, lg in zip(ordered, ledgers)}
    results["evaluated_on"] = "held-out aligned rows" if test.any() else "training rows"
    log.info("vertical run: %s", results)
    return results


def run_transfer(config: dict, *, base: str | Path = ".", out: str | Path | None = None
                 ) -> dict[str, Any]:
    """The ``[transfer]`` section -> target test accuracy with and without the source model.

    ``source``, ``transfer``, ``test``: CSV paths; ``targets``: a list of CSV paths (one
    per target party); all share the feature columns, ``label`` is the class column
    (integers 0..K-1; the transfer table's labels, if any, are ignored). ``out``: the
    folder of the source's ledger (``ledger.sqlite``; None: in memory).
    """
    from veil.dp import Ledger
    from veil.fl.strategies import FedAvg
    from veil.fl.vertical.transfer import SourceParty, _torch, transfer_learn

    cfg = check_section(config, "transfer")
    torch = _torch()
    base = Path(base)
    label = cfg.get("label", "y")

    def xy(path: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
        table = _read(path, base, what)
        if label not in table.columns:
            raise DataError(f"{what}: no label column {label!r}")
        return (table.drop(columns=[label]).to_numpy(dtype=np.float64),
                table[label].to_numpy(dtype=np.int64))

    targets = cfg.get("targets")
    if not isinstance(targets, list) or not targets:
        raise ConfigError("targets must be a list of CSV paths, one per target party")
    Xs, ys = xy(cfg.get("source"), "source")
    clients = [xy(p, f"targets[{i}]") for i, p in enumerate(targets)]
    test = xy(cfg.get("test"), "test")
    transfer_table = _read(cfg.get("transfer"), base, "transfer")
    transfer = transfer_table.drop(columns=[label], errors="ignore").to_numpy(dtype=np.float64)
    widths = {Xs.shape[1], test[0].shape[1], transfer.shape[1], *(c[0].shape[1]
                                                                  for c in clients)}
    if len(widths) != 1:
        raise DataError(f"source, targets, transfer and test have different feature counts "
                        f"{sorted(widths)}")
    hidden = cfg.get("hidden", 32)
    classes = int(max(ys.max(), *(c[1].max() for c in clients))) + 1

    def make(d: int, k: int) -> Any:
        return torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(hidden, k))

    rng = check_rng(cfg.get("seed"))
    ledger = None
    if cfg.get("noise_multiplier") is not None:
        ledger = Ledger(epsilon=cfg.get("epsilon", 3.0), delta=cfg.get("delta", 1e-5),
                        path=None if out is None else Path(out) / "ledger.sqlite")
    source = SourceParty(Xs, ys, make, teachers=cfg.get("teachers", 1),
                         epochs=cfg.get("source_epochs", 5),
                         noise_multiplier=cfg.get("noise_multiplier"), ledger=ledger,
                         max_queries=cfg.get("max_queries", max(1, transfer.shape[0])),
                         rng=rng.spawn(1)[0])
    strategy = FedAvg(local_epochs=cfg.get("local_epochs", 1),
                      learning_rate=cfg.get("learning_rate", 0.05), batch_size=32)
    rounds = cfg.get("rounds", 10)
    torch.manual_seed(int(rng.integers(0, 2**31)))
    student = make(Xs.shape[1], classes)
    seed = int(rng.integers(0, 2**31))  # the same simulated rounds for both runs
    base_run, _ = transfer_learn(None, None, clients, student, strategy, rounds, test=test,
                                 rng=seed)
    moved, _ = transfer_learn(source, transfer, clients, student, strategy, rounds,
                              test=test, rng=seed)
    results = {"accuracy_without_source": base_run.rounds[-1]["accuracy"],
               "accuracy_with_source": moved.rounds[-1]["accuracy"]}
    if ledger is not None:
        results["source_epsilon_spent"] = ledger.spent()[0]
    return results
