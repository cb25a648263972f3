"""Vertical and transfer-learning runs from a run file's ``[vertical]`` or ``[transfer]``
section (the language: :mod:`veil.experiments.vertical_config`).

``run_vertical(config)`` reads each party's table (or UCI Adult split by attributes), checks
the tables (the label held by exactly one party, no feature column at two parties, ids of
one type without duplicates), aligns the rows by PSI, trains the model -- in this process,
or with ``flower=True`` each party on its own node of Flower's simulation engine
(:func:`veil.fl.runtime.flower_vertical.simulate`) -- and returns a dict of results.
``out``: the folder for the parties' ledgers (``ledger.sqlite``, the guest's), None:
ledgers in memory.

``run_transfer(config)``: ``protocol = "distill"`` (the default): knowledge distillation
from the source (:mod:`veil.fl.vertical.transfer`), then the targets' federated
fine-tuning (:func:`transfer_learn`: FedAvg, locally or on Flower); ``"he"`` or ``"ss"``:
the secure federated transfer learning of Liu et al. (:mod:`veil.fl.vertical.secure_ftl`,
:mod:`veil.fl.vertical.secure_ftl_ss`), the overlap aligned by PSI.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil._validation import check_array, check_choice, check_epsilon, check_probability
from veil.dp import Ledger
from veil.errors import ConfigError, DataError
from veil.experiments.vertical_config import (
    TRANSFER_KEYS,
    check_section,
    flower_settings,
    read_party_table,
    vertical_settings,
)
from veil.fl.messages import encode
from veil.fl.vertical.align import align
from veil.fl.vertical.data import auc, check_numeric, check_tables, held_out
from veil.fl.vertical.transfer import SourceParty, distill
from veil.random import check_rng

__all__ = ["run_transfer", "run_vertical", "transfer_learn"]

log = logging.getLogger(__name__)


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


def run_vertical(config: dict, *, base: str | Path = ".", out: str | Path | None = None,
                 flower: bool = False) -> dict[str, Any]:
    """The ``[vertical]`` section -> results (see the module docstring)."""
    if flower:
        from veil.fl.runtime.flower_vertical import simulate

        settings = flower_settings(config)
        tables = {p: read_party_table(f, Path(base), f"parties.{p}")
                  for p, f in config["parties"].items()}
        return simulate(settings, tables, out=out)
    cfg = check_section(config, "vertical")
    settings = vertical_settings(cfg)
    model_kind = check_choice(settings.model, "[vertical] model",
                              ("logistic", "linear", "split"))
    id_column, label = settings.id, settings.label
    test_fraction = check_probability(settings.test_fraction, "[vertical] test_fraction",
                                      high_open=True)
    label_epsilon = settings.label_epsilon
    if label_epsilon is not None:
        check_epsilon(label_epsilon, "[vertical] label_epsilon")
    epsilon = settings.epsilon
    if epsilon is not None:
        check_epsilon(epsilon, "[vertical] epsilon")
        if label_epsilon is not None:
            raise ConfigError("[vertical] epsilon (noisy gradients, protocol \"ss\") and "
                              "label_epsilon (protocol \"paillier\", split) exclude each other")
    rng = check_rng(settings.seed)
    tables = _tables(cfg, Path(base), id_column, label, rng)
    if settings.prefix_columns:
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

        classes = split_classes(settings.classes, y_train.astype(np.int64), label_epsilon,
                                "[vertical]")
    ledger, ledgers = None, None
    if label_epsilon is not None:
        ledger = _ledger(out, guest, guest, label_epsilon, settings.label_delta,
                         "rdp" if model_kind != "split" else "pld")
    if epsilon is not None:
        ledgers = [_ledger(out, name, guest, epsilon, settings.delta, "rdp")
                   for name in ordered]
    results: dict[str, Any] = {"aligned": alignment.size, "psi_bytes": alignment.bytes,
                               "parties": ordered, "guest": guest}
    if model_kind == "split":
        model = SplitNN(learning_rate=settings.rate, hidden=settings.hidden,
                        embedding=settings.embedding, label_epsilon=label_epsilon,
                        ledger=ledger, random_state=rng.spawn(1)[0], epochs=settings.epochs,
                        batch_size=settings.batch_size, classes=classes)
        model.fit(train_blocks, y_train.astype(np.int64))
        results["bytes"] = model.bytes_
        results["accuracy"] = model.score(test_blocks, y_test)
        if len(model.classes_) == 2:
            results["auc"] = auc(y_test, model.predict_proba(test_blocks)[:, 1])
    else:
        from veil.fl.vertical.linear import VerticalLinearRegression, VerticalLogisticRegression

        cls = VerticalLogisticRegression if model_kind == "logistic" else \
            VerticalLinearRegression
        model = cls(settings.protocol, key_bits=settings.key_bits,
                    insecure_ok=settings.insecure_ok, decryption=settings.decryption,
                    label_epsilon=label_epsilon, label_delta=settings.label_delta,
                    ledger=ledger, epsilon=epsilon, delta=settings.delta, clip=settings.clip,
                    ledgers=ledgers, random_state=rng.spawn(1)[0], **settings.schedule())
        model.fit(train_blocks, y_train)
        results["seconds_per_epoch"] = model.stats_.seconds
        results["bytes_per_epoch"] = model.stats_.bytes
        if model_kind == "logistic":
            results["accuracy"] = model.score(test_blocks, y_test)
            results["auc"] = auc(y_test, model.decision_function(test_blocks))
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
    from veil.fl.strategies import FedAvg
    from veil.fl.vertical.split import mlp, seed_networks

    if "classes" not in cfg:  # public schema knowledge, never read from the labels
        raise ConfigError("[transfer] classes is required with protocol = \"distill\": the "
                          "number of classes K (labels 0..K-1), declared, not read from the "
                          "source's labels")
    classes = cfg["classes"]
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
        return mlp([d, hidden, k])

    rng = check_rng(cfg.get("seed"))
    # the networks' initial weights (the teachers' and the student's) from the seed, not
    # from whatever state torch's global generator is in
    seed_networks(rng)
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


def transfer_learn(source: SourceParty | None, transfer_X: Any, clients: Sequence[tuple[Any, Any]],
                   student: Any, strategy: Any, rounds: int, *, distill_epochs: int = 20,
                   learning_rate: float = 1e-3, test: tuple[Any, Any] | None = None,
                   classes: Sequence[Any] | None = None, ledger: Ledger | None = None,
                   rng: Any = None,
                   flower: bool = False) -> tuple[Any, Any]:
    """The whole recipe: query, distill, then federated fine-tuning.

    ``student``: the target's torch module. ``source=None``: no transfer (the baseline: the
    targets fine-tune ``student`` from its initial weights). Returns the Federation's
    history and the starting module. ``classes``: the targets' declared label set
    (:class:`veil.fl.Federation`'s). ``ledger``: for a DP federated strategy. ``flower``:
    the fine-tuning on Flower's simulation engine, a node per target
    (:func:`veil.fl.runtime.flower.simulate`; the same model as in this process for a
    seeded run); the source answers its one query where it lives.
    """
    from veil.fl import Federation
    from veil.learn import TorchModel

    rng = check_rng(rng)
    if source is not None:
        transfer_X = check_array(transfer_X, "transfer_X", ndim=2)
        answer = source.answer(encode({"stage": "query",
                                       "X": transfer_X.astype(np.float32)}))
        student = distill(student, transfer_X, answer, epochs=distill_epochs,
                          learning_rate=learning_rate, rng=rng.spawn(1)[0])
    fed = Federation(clients, TorchModel(student), strategy, rounds, test=test,
                     classes=classes, ledger=ledger, rng=rng.spawn(1)[0])
    if flower:
        from veil.fl.runtime.flower import simulate

        return simulate(fed), student
    return fed.run(), student


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


def _floats(table: pd.DataFrame, what: str) -> np.ndarray:
    """A table's feature columns as floats; a non-numeric column is a DataError."""
    check_numeric(table, f"[transfer] {what}")
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
        results["auc"] = auc(truth.astype(np.int64), scores)
    log.info("secure FTL run (%s): %s", protocol, results)
    return results
