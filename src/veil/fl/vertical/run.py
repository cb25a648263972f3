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
    classes = 2                 # split: the number of classes, declared (labels 0..K-1;
                                #   required with label_epsilon; never read from the labels)
    epsilon = 1.0               # or: noisy gradients (ss logistic), every party's rows
    delta = 1e-5                #   clipped to clip (one bound or one per party), a fresh
    clip = 1.0                  #   ledger of that budget for every party
    prefix_columns = false      # true: column names are local to each party ("x0" at the
                                #   guest and at the host are different features), so they
                                #   are read as "guest.x0", "host.x0"; false: a name at two
                                #   parties is refused as an overlap
    identities = "identities.json"  # on Flower: the organisations' identity table
                                #   (veil.fl.runtime.flower_vertical); a local run has no
                                #   relay to guard against and does not read it

Every key is checked (name and type) by :func:`check_section` before anything is read or
spent: a bad one is a :class:`~veil.errors.ConfigError` naming it. ``out``: the folder for
the parties' ledgers (``ledger.sqlite``, the guest's), None: ledgers in memory.

``run_transfer(config)`` takes the ``[transfer]`` section. ``protocol = "distill"`` (the
default): source, targets, transfer and test CSVs with a label column and ``classes = K``
declared (labels 0..K-1: public, never read from the labels; knowledge distillation, then
FedAvg; see :mod:`veil.fl.vertical.transfer`). ``protocol = "he"`` or
``"ss"``: the secure federated transfer learning of Liu et al. between a source with
labels and a target without (:mod:`veil.fl.vertical.secure_ftl`, Paillier;
:mod:`veil.fl.vertical.secure_ftl_ss`, secret sharing), the overlap aligned by PSI::

    [transfer]
    protocol = "ss"             # "he" or "ss"
    id = "id"                   # the id column of both tables
    label = "y"                 # the source's label column (0/1 or -1/+1)
    source = "source.csv"       # id, features, label
    target = "target.csv"       # id, features (no label)
    test = "target_test.csv"    # optional: the target's own people, features and label
    # or UCI Adult split by attributes (veil.fl.vertical.data.vertical_adult), scored on
    # the target's people outside the overlap: dataset = "adult"; overlap = 0.3; rows = 6000
    iterations = 10
    batch_size = 500
    learning_rate = 1.0
    dim = 8                     # the representation's width
    layers = [16]               # ss: hidden widths of each party's MLP ([]: one layer)
    gamma = 0.1                 # the alignment weight
    lam = 0.0                   # L2 penalty
    key_bits = 2048             # he: each party's Paillier key; ss: with correlation
    correlation = "dealer"      # ss: Beaver triples from a "dealer" or from "paillier"
    seed = 0                    # simulation randomness (data split, batches, weights)

A setting of the other protocols is refused by name.
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
           "schedule", "SECTIONS", "TRANSFER_KEYS"]

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
                 "classes": (int,),
                 "prefix_columns": (bool,), "decryption": (str,), "insecure_ok": (bool,),
                 "identities": (str,)},
    "transfer": {"label": (str,), "source": (str,), "targets": (list,), "transfer": (str,),
                 "test": (str,), "classes": (int,), "teachers": (int,), "noise_multiplier": _NUM,
                 "epsilon": _NUM, "delta": _NUM, "max_queries": (int,), "rounds": (int,),
                 "local_epochs": (int,), "learning_rate": _NUM, "hidden": (int,),
                 "source_epochs": (int,), "seed": (int,), "protocol": (str,),
                 "id": (str,), "target": (str,), "dataset": (str,), "overlap": _NUM,
                 "rows": (int,), "iterations": (int,), "batch_size": (int,), "dim": (int,),
                 "layers": (list,), "gamma": _NUM, "lam": _NUM, "key_bits": (int,),
                 "correlation": (str,)},
}
#: [transfer] protocol -> the settings only it reads ("label", "source", "test",
#: "learning_rate", "seed" and "protocol" are common)
TRANSFER_KEYS = {
    "distill": ("targets", "transfer", "classes", "teachers", "noise_multiplier", "epsilon",
                "delta", "max_queries", "rounds", "local_epochs", "hidden", "source_epochs"),
    "he": ("id", "target", "dataset", "overlap", "rows", "iterations", "batch_size", "dim",
           "gamma", "lam", "key_bits"),
    "ss": ("id", "target", "dataset", "overlap", "rows", "iterations", "batch_size", "dim",
           "layers", "gamma", "lam", "key_bits", "correlation"),
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


def read_party_table(path: Any, base: Path, what: str) -> pd.DataFrame:
    """The CSV table at ``path`` (relative to ``base``, the config's folder); ``what`` names
    it in the error when there is no such file."""
    file = Path(str(path))
    file = file if file.is_absolute() else base / file
    if not file.is_file():
        raise DataError(f"{what}: {str(file)!r} is not a file")
    return pd.read_csv(file)


def check_tables(tables: dict[str, pd.DataFrame], id_column: str, label: str) -> str:
    """Refuse tables that cannot be joined vertically; returns the label holder's name.

    Checks: every table has the id column (ids of one type, no duplicates, no missing
    ones); the label is in exactly one table; no other column is in two tables; every
    party holds at least one feature column, all numeric.
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
        features = [c for c in table.columns if c not in (id_column, label)]
        if not features:
            raise DataError(f"party {name!r} holds no feature column")
        _check_numeric(table[features], f"party {name!r}")
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
    return {str(k): read_party_table(v, base, f"parties.{k}") for k, v in parties.items()}


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
    if model_kind == "split":   # checked before a ledger file exists
        from veil.fl.vertical.split import SplitNN, split_classes

        classes = split_classes(cfg.get("classes"), y_train.astype(np.int64), label_epsilon,
                                "[vertical]")
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
        model = SplitNN(learning_rate=cfg.get("learning_rate", 1e-3),
                        hidden=cfg.get("hidden", 64), embedding=cfg.get("embedding", 16),
                        label_epsilon=label_epsilon, ledger=ledger, random_state=rng.spawn(1)[0],
                        epochs=cfg.get("epochs", 10), batch_size=cfg.get("batch_size", 256),
                        classes=classes)
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


def run_transfer(config: dict, *, base: str | Path = ".", out: str | Path | None = None,
                 flower: bool = False) -> dict[str, Any]:
    """The ``[transfer]`` section -> target test accuracy with and without the source model.

    ``source``, ``transfer``, ``test``: CSV paths; ``targets``: a list of CSV paths (one
    per target party); all share the feature columns, ``label`` is the class column
    (integers 0..K-1; the transfer table's labels, if any, are ignored). ``out``: the
    folder of the source's ledger (``ledger.sqlite``; None: in memory). ``flower``: the
    targets' federated fine-tuning on Flower's simulation engine (protocol "distill").
    """
    cfg = check_section(config, "transfer")
    protocol = check_choice(cfg.get("protocol", "distill"), "[transfer] protocol",
                            tuple(TRANSFER_KEYS))
    foreign = sorted(k for other, keys in TRANSFER_KEYS.items() if other != protocol
                     for k in keys if k in cfg and k not in TRANSFER_KEYS[protocol])
    if foreign:
        raise ConfigError(f"[transfer] {foreign} do not apply to protocol = {protocol!r}; "
                          f"its own settings: {sorted(TRANSFER_KEYS[protocol])}")
    if protocol != "distill":
        if flower:
            raise ConfigError(f"[transfer] protocol = {protocol!r} runs under the local "
                              "runtime only (its two parties are not a federation)")
        return _run_secure_ftl(cfg, protocol, Path(base))
    from veil.dp import Ledger
    from veil.fl.strategies import FedAvg
    from veil.fl.vertical.transfer import SourceParty, _torch, transfer_learn

    if "classes" not in cfg:  # public schema knowledge, never read from the labels
        raise ConfigError("[transfer] classes is required with protocol = \"distill\": the "
                          "number of classes K (labels 0..K-1), declared, not read from the "
                          "source's labels")
    classes = cfg["classes"]
    torch = _torch()
    base = Path(base)
    label = cfg.get("label", "y")

    def xy(path: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
        table = read_party_table(path, base, what)
        if label not in table.columns:
            raise DataError(f"{what}: no label column {label!r}")
        return (_floats(table.drop(columns=[label]), what),
                table[label].to_numpy(dtype=np.int64))

    targets = cfg.get("targets")
    if not isinstance(targets, list) or not targets:
        raise ConfigError("targets must be a list of CSV paths, one per target party")
    Xs, ys = xy(cfg.get("source"), "source")
    clients = [xy(p, f"targets[{i}]") for i, p in enumerate(targets)]
    test = xy(cfg.get("test"), "test")
    transfer_table = read_party_table(cfg.get("transfer"), base, "transfer")
    transfer = _floats(transfer_table.drop(columns=[label], errors="ignore"), "transfer")
    widths = {Xs.shape[1], test[0].shape[1], transfer.shape[1], *(c[0].shape[1]
                                                                  for c in clients)}
    if len(widths) != 1:
        raise DataError(f"source, targets, transfer and test have different feature counts "
                        f"{sorted(widths)}")
    hidden = cfg.get("hidden", 32)

    def make(d: int, k: int) -> Any:
        return torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(hidden, k))

    rng = check_rng(cfg.get("seed"))
    # the networks' initial weights (the teachers' and the student's) from the seed, not
    # from whatever state torch's global generator is in
    torch.manual_seed(int(rng.integers(0, 2**31)))
    ledger = None
    if cfg.get("noise_multiplier") is not None:
        ledger = Ledger(epsilon=cfg.get("epsilon", 3.0), delta=cfg.get("delta", 1e-5),
                        path=None if out is None else Path(out) / "ledger.sqlite")
    source = SourceParty(Xs, ys, make, classes=classes, teachers=cfg.get("teachers", 1),
                         epochs=cfg.get("source_epochs", 5),
                         noise_multiplier=cfg.get("noise_multiplier"), ledger=ledger,
                         max_queries=cfg.get("max_queries", max(1, transfer.shape[0])),
                         rng=rng.spawn(1)[0])
    strategy = FedAvg(local_epochs=cfg.get("local_epochs", 1),
                      learning_rate=cfg.get("learning_rate", 0.05), batch_size=32)
    rounds = cfg.get("rounds", 10)
    student = make(Xs.shape[1], classes)
    seed = int(rng.integers(0, 2**31))  # the same simulated rounds for both runs
    base_run, _ = transfer_learn(None, None, clients, student, strategy, rounds, test=test,
                                 classes=list(range(classes)), rng=seed, flower=flower)
    moved, _ = transfer_learn(source, transfer, clients, student, strategy, rounds,
                              test=test, classes=list(range(classes)), rng=seed, flower=flower)
    results = {"accuracy_without_source": base_run.rounds[-1]["accuracy"],
               "accuracy_with_source": moved.rounds[-1]["accuracy"]}
    if ledger is not None:
        results["source_epsilon_spent"] = ledger.spent()[0]
    return results


def _ftl_tables(cfg: dict, base: Path, id_column: str, label: str, rng: Any
                ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """(source, target, test) of a secure FTL run: CSV files, or Adult split by attributes
    (the test: the target's people outside the overlap, with their labels)."""
    dataset = cfg.get("dataset")
    if dataset is None:
        for key in ("overlap", "rows"):
            if key in cfg:
                raise ConfigError(f"[transfer] {key} applies to dataset = \"adult\" only")
        if "source" not in cfg or "target" not in cfg:
            raise ConfigError("[transfer] source and target (CSV paths) are needed, or "
                              "dataset = \"adult\"")
        test = read_party_table(cfg["test"], base, "test") if "test" in cfg else None
        return (read_party_table(cfg["source"], base, "source"),
                read_party_table(cfg["target"], base, "target"), test)
    from veil.fl.vertical.data import vertical_adult

    check_choice(dataset, "[transfer] dataset", ("adult",))
    for key in ("source", "target", "test"):
        if key in cfg:
            raise ConfigError(f"[transfer] {key} is not allowed with dataset: its tables come "
                              "from the data set")
    if id_column != "id":
        raise ConfigError(f"[transfer] id={id_column!r} is not allowed with dataset: its "
                          "tables have the id column 'id'")
    overlap = check_probability(cfg.get("overlap", 0.3), "[transfer] overlap", low_open=True,
                                high_open=True)
    tables = vertical_adult(2, overlap=overlap, rows=cfg.get("rows"), label=label, rng=rng)
    source, target = tables["guest"], tables["host1"]
    own = target[~target[id_column].isin(source[id_column])]
    labels = _adult_labels(own[id_column], label)
    return source, target, own.assign(**{label: labels})


def _check_numeric(table: pd.DataFrame, what: str) -> None:
    """A non-numeric column of ``table`` (features only) is a DataError naming it."""
    bad = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    if bad:
        raise DataError(f"{what}: the feature columns {bad} are not numeric (encode them "
                        "first, e.g. one-hot)")


def _floats(table: pd.DataFrame, what: str) -> np.ndarray:
    """A table's feature columns as floats; a non-numeric column is a DataError."""
    _check_numeric(table, f"[transfer] {what}")
    return table.to_numpy(dtype=np.float64)


def _adult_labels(ids: pd.Series, label: str) -> np.ndarray:
    """The Adult labels of ids ``adult-<row>`` (the simulation's ground truth)."""
    from veil.datasets import encode_adult, load_adult

    y = encode_adult(load_adult("train")).y
    return y[ids.str.removeprefix("adult-").astype(np.int64).to_numpy()]


def _run_secure_ftl(cfg: dict, protocol: str, base: Path) -> dict[str, Any]:
    """A ``[transfer]`` run of the secure FTL protocol ``"he"`` or ``"ss"`` (module
    docstring): every setting is checked and the parties are built before any key, share
    or triple is made."""
    from veil._validation import check_int, check_positive
    from veil.crypto.paillier import check_key_bits

    id_column, label = cfg.get("id", "id"), cfg.get("label", "y")
    iterations = check_int(cfg.get("iterations", 10), "[transfer] iterations", low=1)
    batch_size = check_int(cfg.get("batch_size", 500), "[transfer] batch_size", low=1)
    layers = cfg.get("layers", [])
    if not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in layers):
        raise ConfigError(f"[transfer] layers={layers!r} is not allowed: hidden widths, "
                          "integers >= 1 ([] for one layer)")
    kw = {"dim": check_int(cfg.get("dim", 8), "[transfer] dim", low=1),
          "learning_rate": check_positive(cfg.get("learning_rate", 1.0),
                                          "[transfer] learning_rate"),
          "gamma": check_positive(cfg.get("gamma", 0.1), "[transfer] gamma", allow_zero=True),
          "lam": check_positive(cfg.get("lam", 0.0), "[transfer] lam", allow_zero=True)}
    correlation = check_choice(cfg.get("correlation", "dealer"), "[transfer] correlation",
                               ("dealer", "paillier"))
    if protocol == "ss" and correlation == "dealer" and "key_bits" in cfg:
        raise ConfigError("[transfer] key_bits applies to protocol = \"he\" or correlation = "
                          "\"paillier\"; the dealer's triples need no key")
    try:
        key_bits = check_key_bits(cfg.get("key_bits", 2048), insecure_ok=False)
    except ConfigError as exc:
        raise ConfigError(f"[transfer] key_bits: {exc}") from None
    rng = check_rng(cfg.get("seed"))
    source_table, target_table, test = _ftl_tables(cfg, base, id_column, label, rng)
    for what, table in (("source", source_table), ("target", target_table)):
        if id_column not in table.columns:
            raise DataError(f"[transfer] {what}: no id column {id_column!r}")
    if label not in source_table.columns:
        raise DataError(f"[transfer] source: no label column {label!r}")
    if label in target_table.columns:
        raise ConfigError(f"[transfer] target holds the label column {label!r}: the target "
                          "has no labels in federated transfer learning (move them to test)")
    features = target_table.columns.drop(id_column)
    alignment = align(source_table, {"target": target_table},
                      column=id_column)              # PSI keys: the CSPRNG, whatever the seed
    XA = _floats(source_table.drop(columns=[id_column, label]), "source")
    yA = source_table[label].to_numpy()
    XB = _floats(target_table[features], "target")
    X_test = y_test = None
    if test is not None:
        missing = [c for c in [*features, label] if c not in test.columns]
        if missing:
            raise DataError(f"[transfer] test lacks the columns {missing} (the target's "
                            f"features and the label {label!r})")
        X_test, y_test = _floats(test[features], "test"), test[label].to_numpy()
    ov_a, ov_b = alignment.rows["guest"], alignment.rows["target"]
    seeds = rng.spawn(3)
    if protocol == "he":
        from veil.fl.vertical.secure_ftl import (
            FTLSource,
            FTLTarget,
            predict_secure_ftl,
            train_secure_ftl,
        )

        he = {"key_bits": key_bits, **kw}
        source = FTLSource(XA, yA, ov_a, peer_features=XB.shape[1], rng=seeds[0], **he)
        target = FTLTarget(XB, ov_b, peer_features=XA.shape[1], rng=seeds[1], **he)
        stats = train_secure_ftl(source, target, iterations, batch_size=batch_size,
                                 rng=seeds[2])
        scores = None if X_test is None else predict_secure_ftl(source, target, X_test)
    else:
        from veil.fl.vertical.secure_ftl_ss import (
            SSFTLSource,
            SSFTLTarget,
            predict_ss_ftl,
            train_ss_ftl,
        )

        source = SSFTLSource(XA, yA, ov_a, layers=layers, rng=seeds[0], **kw)
        target = SSFTLTarget(XB, ov_b, layers=layers, rng=seeds[1], **kw)
        session = {"correlation": correlation, "paillier_bits": key_bits}
        stats = train_ss_ftl(source, target, iterations, batch_size=batch_size, rng=seeds[2],
                             **session)
        scores = None if X_test is None else predict_ss_ftl(source, target, X_test, **session)
    results: dict[str, Any] = {"protocol": protocol, "aligned": alignment.size,
                               "psi_bytes": alignment.bytes,
                               "seconds_per_iteration": stats.seconds, "bytes": stats.bytes}
    if scores is not None:
        truth = np.asarray(y_test) > 0
        results["accuracy"] = float(np.mean((scores > 0) == truth))
        results["auc"] = _auc(truth.astype(np.int64), scores)
    log.info("secure FTL run (%s): %s", protocol, results)
    return results
