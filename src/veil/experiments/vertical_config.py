"""The language of vertical and transfer-learning run files: ``[vertical]`` and ``[transfer]``.

The one schema of these sections (:data:`SECTIONS`: every key and its type;
:func:`check_section`), and the objects ``veil.fl`` takes made from them
(:func:`vertical_settings`, :func:`flower_settings`: a
:class:`~veil.fl.vertical.parties.VerticalSettings`, whose fields hold the defaults). The runs
are :mod:`veil.experiments.vertical_run`. ``[vertical]``: each party's CSV table, the id
column and the label column::

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
spent: a bad one is a :class:`~veil.errors.ConfigError` naming it.

``[transfer]``: ``protocol = "distill"`` (the
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

A setting of the other protocols is refused by name (:data:`TRANSFER_KEYS`).
Relative paths are resolved against the directory of the TOML file
(:func:`read_party_table`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil.errors import ConfigError, DataError
from veil.fl.vertical.parties import VerticalSettings, check_flower

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SECTIONS", "TRANSFER_KEYS", "FILE_KEYS", "check_section", "flower_settings",
           "read_party_table", "vertical_settings"]

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
#: the [vertical] keys about files and data sets, read by the run (every other key is a
#: field of VerticalSettings)
FILE_KEYS = frozenset({"parties", "dataset", "overlap", "rows", "identities"})
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
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"[{section}] {key}={value!r} is not allowed: must be a finite "
                              "number")
    fraction = config.get("test_fraction", 0.0)
    if not 0 <= fraction < 1:
        raise ConfigError(f"[{section}] test_fraction={fraction!r} is not allowed: must be in "
                          "[0, 1) (the share of aligned rows held out for the metrics)")
    return config


def read_party_table(path: Any, base: Path, what: str) -> pd.DataFrame:
    """The CSV table at ``path`` (relative to ``base``, the config's folder); ``what`` names
    it in the error when there is no such file."""
    file = Path(str(path))
    file = file if file.is_absolute() else base / file
    if not file.is_file():
        raise DataError(f"{what}: {str(file)!r} is not a file")
    import pandas as pd  # a node reads its table once, at the handshake

    return pd.read_csv(file)


def vertical_settings(section: Any) -> VerticalSettings:
    """The ``[vertical]`` section as the settings its parties agree on (checked by
    :func:`check_section`; unset keys take the settings' defaults). ``parties``: the names
    of ``parties = { name = "file.csv" }`` in the file's order (none for ``dataset``: its
    tables name their parties)."""
    cfg = check_section(section, "vertical")
    given = {k: v for k, v in cfg.items() if k not in FILE_KEYS}
    if isinstance(given.get("clip"), list):
        given["clip"] = tuple(given["clip"])
    parties = cfg.get("parties")
    names = tuple(str(p) for p in parties) if isinstance(parties, Mapping) else ()
    return VerticalSettings(parties=names, **given)


def flower_settings(section: Any) -> VerticalSettings:
    """:func:`vertical_settings` of a run with each organisation on its own Flower node:
    a ConfigError unless it can run there (:func:`veil.fl.vertical.parties.check_flower`)
    with each organisation's own table."""
    settings = vertical_settings(section)
    check_flower(settings)
    if "dataset" in section:
        raise ConfigError("[vertical] dataset does not run on Flower: each organisation "
                          "brings its own table (parties = { name = \"file.csv\" })")
    return settings
