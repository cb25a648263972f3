"""Experiments as run directories (:mod:`veil.audit.rundir`): one persisted Ledger per model.

A run directory's records point at ledger files: the certified spend of each trained model,
which ``veil audit`` reopens. An experiment keeps its ledgers in a folder of its own inside
its output directory (:func:`ledger_folder`), one file per model (:func:`persisted_ledger`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from veil.dp.ledger import Ledger
from veil.errors import ConfigError

__all__ = ["ledger_folder", "persisted_ledger", "slug"]

_LEDGER_FILES = ("*.sqlite", "*.sqlite-wal", "*.sqlite-shm")


def slug(label: str) -> str:
    """A file-name-safe form of a record label: lower case, other characters as '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", label.lower()).strip("-") or "run"


def ledger_folder(path: str | os.PathLike) -> Path:
    """The folder for an experiment's ledgers, created if absent. A folder that already holds
    ledger files is refused (:class:`~veil.errors.ConfigError`): they are the audit trail of
    budget an earlier run spent, so veil never deletes them, and an old ledger reopened would
    charge a new model to the old model's budget."""
    folder = Path(path)
    old = sorted(p.name for pattern in _LEDGER_FILES for p in folder.glob(pattern))
    if old:
        raise ConfigError(f"{folder} already holds the ledgers of an earlier run "
                          f"({', '.join(old[:3])}{', ...' if len(old) > 3 else ''}); veil never "
                          "deletes a ledger (it records budget spent): write the run elsewhere")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def persisted_ledger(folder: Path, label: str, epsilon: float, delta: float, *,
                     accountant: str = "pld") -> Ledger:
    """A new Ledger of budget (epsilon, delta) persisted at ``folder/<slug(label)>.sqlite``."""
    path = folder / f"{slug(label)}.sqlite"
    if path.exists():
        raise ConfigError(f"label={label!r}: the ledger file {path} already belongs to another "
                          "model of this run; give every model a distinct label")
    return Ledger(epsilon, delta, accountant=accountant, path=path)
