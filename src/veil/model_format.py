"""The file format of a trained model: arrays and JSON, never pickle.

A model file is a NumPy ``.npz`` archive (``numpy.savez``; read back with
``allow_pickle=False``, so loading a file runs no code from it) holding

* ``veil.json``: a UTF-8 JSON header, stored as a uint8 array::

      {"format": "veil-model", "version": 1,
       "class": "veil.learn.linear.LogisticRegression",   # or "torch.nn.Module"
       "params": {...},        # the estimator's constructor arguments that are plain values
       "state": {...},         # its learned attributes (``coef_`` ...), arrays by reference
       "metadata": {"feature_names": [...], "encoding": [...], "classes": [...],
                    "epsilon": 0.93, "delta": 1e-05, "ledger": "ledger.sqlite", ...}}

* one array per learned array (``a0``, ``a1``, ...), referenced from ``state`` as
  ``{"__array__": "a0"}``; a torch module's ``state_dict`` tensors likewise.

Only classes defined inside veil are rebuilt (any other class name is refused), so a file
from elsewhere can name nothing that runs on load. Learned state may hold JSON values, NumPy
arrays, dicts and lists of them, and veil dataclasses (a decision tree's nodes). A model's
``ledger_`` (the Ledger its training was charged to) is recorded in the metadata (its file
and the spend) rather than stored. A torch network is stored as its ``state_dict``; its
architecture is code, so :func:`load_model` loads the weights into a ``module`` you pass.

``encoding`` describes, column by column, how a raw table becomes the feature matrix
(:func:`encode_table`): ``{"column": c, "kind": "range", "low": lo, "high": hi}`` (clip,
then scale to [0, 1]), ``"log"`` (``log1p(clip(x, 0, high)) / log1p(high)``), ``"scale"``
(``x * factor``), ``"onehot"`` (over ``categories``) or ``"raw"`` (the number as it is).
The version in the header rises with any change a reader must know about; a file of a newer
version is refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import math
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from veil._json import to_jsonable
from veil.errors import ConfigError, DataError

__all__ = ["FORMAT", "VERSION", "ModelFile", "encode_table", "encoded_names", "load_model",
           "save_model"]

FORMAT = "veil-model"
VERSION = 1
_HEADER = "veil.json"
_TORCH = "torch.nn.Module"


@dataclasses.dataclass
class ModelFile:
    """A loaded model file: the model and the header's ``metadata``."""

    model: Any
    metadata: dict[str, Any]
    version: int = VERSION


def _qualname(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _is_torch_module(obj: Any) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == "torch.nn.modules.module.Module"
               for c in type(obj).__mro__)


class _Encoder:
    """Learned state to JSON, with arrays set aside for the archive."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, value: Any) -> dict[str, str]:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = np.asarray(value)
        return {"__array__": name}

    def value(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            v = float(value)
            return v if math.isfinite(v) else {"__float__": str(v)}
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                return {"__list__": [self.value(v, where) for v in value.tolist()]}
            return self.array(value)
        if isinstance(value, Mapping):
            if all(isinstance(k, str) for k in value):
                return {"__dict__": {k: self.value(v, f"{where}[{k!r}]")
                                     for k, v in value.items()}}
            return {"__items__": [[self.value(k, where), self.value(v, f"{where}[{k!r}]")]
                                  for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            kind = "__tuple__" if isinstance(value, tuple) else "__list__"
            return {kind: [self.value(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if dataclasses.is_dataclass(value) and type(value).__module__.startswith("veil."):
            return {"__dataclass__": _qualname(value),
                    "fields": {f.name: self.value(getattr(value, f.name), f"{where}.{f.name}")
                               for f in dataclasses.fields(value)}}
        if hasattr(value, "reveal"):
            raise ConfigError(f"{where} is secret-shared: reveal the model (open its shares) "
                              "before saving it")
        raise ConfigError(f"{where} ({type(value).__name__}) cannot be stored in a model file "
                          "(arrays, numbers, strings, lists, dicts and veil dataclasses can)")


def _decode(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        name = value["__array__"]
        if name not in arrays:
            raise DataError(f"model file: array {name!r} is missing")
        return arrays[name]
    if "__float__" in value:
        return float(value["__float__"])
    if "__dict__" in value:
        return {k: _decode(v, arrays) for k, v in value["__dict__"].items()}
    if "__items__" in value:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in value["__items__"]}
    if "__list__" in value:
        return [_decode(v, arrays) for v in value["__list__"]]
    if "__tuple__" in value:
        return tuple(_decode(v, arrays) for v in value["__tuple__"])
    if "__dataclass__" in value:
        cls = _veil_class(value["__dataclass__"])
        if not dataclasses.is_dataclass(cls):
            raise DataError(f"model file: {value['__dataclass__']!r} is not a dataclass")
        return cls(**{k: _decode(v, arrays) for k, v in value["fields"].items()})
    raise DataError(f"model file: unknown value {sorted(value)!r}")


def _veil_class(name: str) -> type:
    """The veil class called ``name`` (``module.QualName``); anything else is refused."""
    module, _, qualname = str(name).rpartition(".")
    if not module.startswith("veil.") or not qualname.isidentifier():
        raise DataError(f"model file: class {name!r} is not a veil class; only veil's own "
                        "models are loaded")
    try:
        cls = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        raise DataError(f"model file: class {name!r} does not exist in this veil") from None
    if not isinstance(cls, type):
        raise DataError(f"model file: {name!r} is not a class")
    return cls


def _ledger_metadata(ledger: Any) -> dict[str, Any]:
    eps, delta = ledger.spent()
    return {"epsilon": eps, "delta": delta, "ledger": getattr(ledger, "path", None)}


def save_model(path: str | os.PathLike, model: Any, *,
               feature_names: Sequence[str] | None = None,
               encoding: Sequence[Mapping[str, Any]] | None = None,
               classes: Sequence[Any] | None = None, epsilon: float | None = None,
               delta: float | None = None, ledger: Any = None,
               **metadata: Any) -> Path:
    """Write ``model`` (a fitted veil estimator, or a torch ``nn.Module``) to ``path``.

    The metadata records what a reader needs to use the model: ``feature_names`` (in the
    order of the model's columns), ``encoding`` (module docstring), ``classes`` (label of
    each class index), and the privacy spent: ``epsilon``/``delta`` as given, else those of
    ``ledger`` (or of the model's own ``ledger_``), with the ledger's file. Extra keyword
    arguments are stored as they are (JSON values). Written atomically (a temporary file
    renamed over ``path``): a crash leaves the old file or the new one.
    """
    path = Path(path)
    enc = _Encoder()
    if _is_torch_module(model):
        cls, params = _TORCH, {}
        state = {"state_dict": {"__dict__": {
            k: enc.array(v.detach().cpu().numpy()) for k, v in model.state_dict().items()}}}
    else:
        cls = _qualname(model)
        if any(hasattr(v, "reveal") for v in vars(model).values()):
            raise ConfigError(f"model={type(model).__name__} holds secret-shared weights: save "
                              "model.reveal() (a release every party must agree to)")
        if not cls.startswith("veil.") or not hasattr(model, "get_params"):
            raise ConfigError(f"model={type(model).__name__} is not allowed: expected a veil "
                              "estimator or a torch nn.Module")
        learned = {k: v for k, v in vars(model).items()
                   if k.endswith("_") and not k.startswith("_")}
        if not learned:
            raise ConfigError(f"model={type(model).__name__} is not fitted: fit it first")
        ledger = ledger if ledger is not None else learned.pop("ledger_", None)
        learned.pop("ledger_", None)
        params = {}
        for key, value in model.get_params(deep=False).items():
            try:
                params[key] = enc.value(value, key)
            except ConfigError:
                continue  # a ledger, an rng, a module: not part of the fitted model
        state = {k: enc.value(v, k) for k, v in learned.items()}
    meta: dict[str, Any] = {}
    if isinstance(ledger, (str, os.PathLike)):
        meta["ledger"] = os.fspath(ledger)
    elif ledger is not None:
        meta.update(_ledger_metadata(ledger))
    if classes is None and hasattr(model, "classes_"):
        classes = list(np.asarray(model.classes_).tolist())
    if feature_names is None and hasattr(model, "feature_names_in_"):
        feature_names = list(model.feature_names_in_)
    given = {"feature_names": feature_names, "encoding": encoding, "classes": classes,
             "epsilon": epsilon, "delta": delta, **metadata}
    meta.update({k: v for k, v in given.items() if v is not None})
    header = {"format": FORMAT, "version": VERSION, "class": cls, "params": params,
              "state": state, "metadata": to_jsonable(meta)}
    blob = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **{_HEADER: blob}, **enc.arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(buffer.getvalue())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_model(path: str | os.PathLike, *, module: Any = None) -> ModelFile:
    """Read a model file written by :func:`save_model`. A torch model's weights are loaded
    into ``module`` (same architecture), which is returned as the model."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"model file {str(path)!r} is not an existing file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path} is not a veil model file ({exc})") from None
    try:
        header = json.loads(arrays.pop(_HEADER).tobytes().decode("utf-8"))
    except (KeyError, UnicodeDecodeError, json.JSONDecodeError):
        raise DataError(f"{path} is not a veil model file (no readable {_HEADER})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DataError(f"{path} is not a veil model file (format "
                        f"{header.get('format') if isinstance(header, dict) else None!r})")
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise DataError(f"{path}: model format version {version!r}; this veil reads up to "
                        f"{VERSION}: upgrade veil to load it")
    state = header.get("state", {})
    if header["class"] == _TORCH:
        if module is None:
            raise ConfigError(f"{path} holds torch weights: pass module= (the network, same "
                              "architecture) to load them into")
        import torch

        weights = _decode(state["state_dict"], arrays)
        module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
        return ModelFile(module, header.get("metadata", {}), version)
    cls = _veil_class(header["class"])
    params = {k: _decode(v, arrays) for k, v in header.get("params", {}).items()}
    try:
        model = cls(**params)
    except TypeError as exc:
        raise DataError(f"{path}: cannot rebuild {header['class']} ({exc})") from None
    for key, value in state.items():
        if not (key.endswith("_") and key.isidentifier()):
            raise DataError(f"{path}: learned attribute {key!r} is not allowed")
        setattr(model, key, _decode(value, arrays))
    return ModelFile(model, header.get("metadata", {}), version)


def encoded_names(encoding: Sequence[Mapping[str, Any]]) -> list[str]:
    """The feature names ``encoding`` produces: ``column`` or ``column=category``."""
    names: list[str] = []
    for step in encoding:
        if step["kind"] == "onehot":
            names += [f"{step['column']}={c}" for c in step["categories"]]
        else:
            names.append(str(step["column"]))
    return names


def encode_table(table: Any, encoding: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The feature matrix of ``table`` (a pandas DataFrame of raw columns) under
    ``encoding`` (module docstring); a missing column or an unknown category is a
    :class:`~veil.errors.DataError`."""
    blocks = []
    for step in encoding:
        column, kind = step["column"], step["kind"]
        if column not in table.columns:
            raise DataError(f"the table has no column {column!r}, which the model needs "
                            f"(columns: {list(map(str, table.columns))})")
        raw = table[column]
        if kind == "onehot":
            cats = [str(c) for c in step["categories"]]
            values = raw.astype(str).str.strip()
            unknown = sorted(set(values) - set(cats))
            if unknown:
                raise DataError(f"column {column!r} holds values the model never saw: "
                                f"{unknown[:5]} (known: {cats})")
            blocks.append((values.to_numpy()[:, None] == np.array(cats)[None, :]).astype(float))
            continue
        try:
            x = raw.to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(f"column {column!r} must be numeric for the model") from None
        if kind == "range":
            lo, hi = float(step["low"]), float(step["high"])
            x = (np.clip(x, lo, hi) - lo) / (hi - lo)
        elif kind == "log":
            hi = float(step["high"])
            x = np.log1p(np.clip(x, 0.0, hi)) / np.log1p(hi)
        elif kind == "scale":
            x = x * float(step["factor"])
        elif kind != "raw":
            raise DataError(f"encoding kind {kind!r} of column {column!r} is unknown")
        blocks.append(x[:, None])
    if not blocks:
        raise DataError("the model's encoding is empty")
    return np.hstack(blocks)
