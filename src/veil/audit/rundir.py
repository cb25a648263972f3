"""The run directory: what a training run leaves behind for ``veil audit RUN_DIR``.

Layout (format ``veil-run/1``)::

    RUN_DIR/
      run.json          the description below (required)
      ledger.sqlite     a persisted veil.dp.Ledger (optional; any name, see "ledger")
      <label>.npz       audit arrays of one run record (optional; see "scores")

``run.json``::

    {
      "format": "veil-run/1",
      "name": "adult logistic regression",       # free text
      "kind": "dpsgd",                    # central|dpsgd|fedavg|dpfedavg|hybrid|other
      "runs": [                                 # one record per trained model (a sweep: several)
        {
          "label": "eps=4",                     # unique within the file
          "group": "DP-SGD",                    # optional: records of one group are one
                                                # curve across epsilon in the report's plots
          "ledger": "ledger.sqlite",            # optional, relative to RUN_DIR: the certified spend
          "epsilon": 4.0, "delta": 1e-05,       # optional: the guarantee claimed without a ledger
          "accuracy": 0.83,                     # optional: test accuracy (the utility axis)
          "metrics": {"loss": 0.41},            # optional: any further numbers
          "cost": {"seconds": 12.0, "rounds": 20, "bytes": 123456},   # optional
          "scores": "eps=4.npz"                 # optional, relative to RUN_DIR
        }
      ]
    }

The ``scores`` file holds any of these arrays (each pair complete, one value per entry):

* ``member_scores``, ``nonmember_scores`` — attack scores (higher = member, e.g. the loss
  attack's log p_y) of audit records under the trained model. Whether each audit record is
  a member must be decided by an independent fair coin *before* training (the one-run
  audit's assumption; a random half-split is the common approximation).
* ``trial_member_scores``, ``trial_nonmember_scores`` — one score per *independent training
  run* with / without a target record: the Clopper–Pearson audit.
* ``canary_scores``, ``canary_included`` — inserted canary records or gradients (one-run).
* ``client_canary_scores``, ``client_canary_included`` — canary clients of a federated run.

:func:`write_run` writes this layout (``veil fl run`` and experiments can call it);
:func:`read_run` reads and validates it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veil._io import atomic_open, atomic_write
from veil._validation import check_choice
from veil.errors import ConfigError, DataError

FORMAT = "veil-run/1"
KINDS = ("central", "dpsgd", "fedavg", "dpfedavg", "hybrid", "other")
#: array pairs a scores file may hold: (first, second) must come together
SCORE_PAIRS = (("member_scores", "nonmember_scores"),
               ("trial_member_scores", "trial_nonmember_scores"),
               ("canary_scores", "canary_included"),
               ("client_canary_scores", "client_canary_included"))
_KEYS = {k for pair in SCORE_PAIRS for k in pair}
_SAFE = re.compile(r"[^A-Za-z0-9_.=+-]+")


@dataclass
class RunRecord:
    """One trained model of a run, with what is known of its privacy and utility."""

    label: str
    epsilon: float | None = None
    delta: float | None = None
    ledger: str | None = None
    accuracy: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    group: str | None = None


@dataclass
class Run:
    """A run directory's content (``root`` is where relative paths point)."""

    name: str
    kind: str
    records: list[RunRecord]
    root: Path | None = None

    def ledger_path(self, record: RunRecord) -> Path | None:
        if record.ledger is None:
            return None
        path = Path(record.ledger)
        return path if path.is_absolute() or self.root is None else self.root / path


def _check_arrays(arrays: dict[str, Any], where: str) -> dict[str, np.ndarray]:
    unknown = set(arrays) - _KEYS
    if unknown:
        raise DataError(f"{where}: unknown array(s) {sorted(unknown)}; allowed: "
                        f"{', '.join(sorted(_KEYS))}")
    out = {k: np.asarray(v) for k, v in arrays.items()}
    for first, second in SCORE_PAIRS:
        if (first in out) != (second in out):
            have, lack = (first, second) if first in out else (second, first)
            raise DataError(f"{where}: {have} is given without {lack}; they come as a pair")
        if first in out and second.endswith("_included") and out[first].shape != out[second].shape:
            raise DataError(f"{where}: {first} has shape {out[first].shape} and {second} "
                            f"{out[second].shape}; need one inclusion flag per score")
    for k, v in out.items():
        if v.ndim != 1 or v.size == 0:
            raise DataError(f"{where}: {k} has shape {v.shape}; expected a non-empty 1-D array")
    return out


def _number(value: Any, name: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(f"{where}: {name}={value!r} is not a finite number")
    return float(value)


def write_run(path: str | os.PathLike, run: Run) -> Path:
    """Write ``run`` as a run directory at ``path`` (created); returns the run.json path."""
    check_choice(run.kind, "kind", KINDS)
    labels = [r.label for r in run.records]
    if not labels or len(set(labels)) != len(labels):
        raise ConfigError(f"run records need distinct labels; got {labels!r}")
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for record in run.records:
        entry: dict[str, Any] = {"label": record.label}
        for key in ("group", "ledger", "epsilon", "delta", "accuracy"):
            if getattr(record, key) is not None:
                entry[key] = getattr(record, key)
        if record.metrics:
            entry["metrics"] = record.metrics
        if record.cost:
            entry["cost"] = record.cost
        if record.arrays:
            arrays = _check_arrays(record.arrays, f"run record {record.label!r}")
            name = _SAFE.sub("_", record.label) + ".npz"
            with atomic_open(root / name, "wb") as fh:
                np.savez(fh, **arrays)
            entry["scores"] = name
        entries.append(entry)
    target = root / "run.json"
    atomic_write(target, json.dumps({"format": FORMAT, "name": run.name, "kind": run.kind,
                                     "runs": entries}, indent=2))
    return target


def read_run(path: str | os.PathLike) -> Run:
    """Read and validate a run directory (or its run.json)."""
    p = Path(path)
    file = p / "run.json" if p.is_dir() else p
    if not file.is_file():
        raise DataError(f"{path}: no run.json found; a run directory holds run.json "
                        "(see veil.audit.rundir for the format)")
    try:
        doc = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise DataError(f"{file}: format {found!r} is not {FORMAT!r}")
    kind = doc.get("kind", "other")
    if kind not in KINDS:
        raise DataError(f"{file}: kind={kind!r} is not one of {', '.join(KINDS)}")
    entries = doc.get("runs")
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{file}: 'runs' must be a non-empty list of run records")
    root = file.parent
    records, seen = [], set()
    for i, entry in enumerate(entries):
        where = f"{file}: runs[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str):
            raise DataError(f"{where} must be an object with a string 'label'")
        label = entry["label"]
        if label in seen:
            raise DataError(f"{where}: label {label!r} is used twice")
        seen.add(label)
        arrays: dict[str, np.ndarray] = {}
        if entry.get("scores") is not None:
            from veil.learn.model_format import read_arrays

            scores = root / str(entry["scores"])
            arrays = _check_arrays(read_arrays(scores, what=f"{where}'s scores file (an .npz "
                                               "archive of score arrays)"), f"{scores}")
        for key in ("metrics", "cost"):
            if not isinstance(entry.get(key, {}), dict):
                raise DataError(f"{where}: '{key}' must be an object")
        ledger, group = entry.get("ledger"), entry.get("group")
        if ledger is not None and not isinstance(ledger, str):
            raise DataError(f"{where}: 'ledger' must be a path string")
        if group is not None and not isinstance(group, str):
            raise DataError(f"{where}: 'group' must be a string")
        delta = _number(entry.get("delta"), "delta", where)
        if delta is not None and not 0.0 <= delta < 1.0:
            raise DataError(f"{where}: delta={delta!r} must be in [0, 1)")
        records.append(RunRecord(
            label=label, epsilon=_number(entry.get("epsilon"), "epsilon", where), delta=delta,
            ledger=ledger, accuracy=_number(entry.get("accuracy"), "accuracy", where),
            metrics=dict(entry.get("metrics", {})), cost=dict(entry.get("cost", {})),
            arrays=arrays, group=group))
    return Run(name=str(doc.get("name", root.name)), kind=kind, records=records, root=root)
