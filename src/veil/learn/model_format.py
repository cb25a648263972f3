"""The file format of a trained model: arrays and JSON, never pickle.

A model file is a NumPy ``.npz`` archive (``numpy.savez``; read back by :func:`read_arrays`,
the one reader of veil's array files, which never unpickles: loading a file runs no code
from it) holding

* ``veil.json``: a UTF-8 JSON header, stored as a uint8 array::

      {"format": "veil-model", "version": 1,
       "class": "veil.learn.linear.LogisticRegression",   # or "torch.nn.Module"
       "params": {...},        # the estimator's constructor arguments that are plain values
       "state": {...},         # its learned attributes (``coef_`` ...), arrays by reference
       "metadata": {"feature_names": [...], "encoding": [...], "classes": [...],
                    "epsilon": 0.93, "delta": 1e-05, "ledger": "ledger.sqlite", ...}}

* one array per learned array (``a0``, ``a1``, ...), referenced from ``state`` as
  ``{"__array__": "a0"}``; a torch module's ``state_dict`` tensors likewise.

A file names its class; only the classes in a closed registry are rebuilt: a module that
defines a model (or a dataclass of a model's learned state, a decision tree's node) registers
it with :func:`register_model_class` when it is imported, a name registers once (a duplicate
is refused), and the loader never imports anything by a name read from a file. Any other
class name is refused, so a file can name nothing that runs on load beyond the registered
constructors, called with the file's plain values. Learned state may hold JSON values, NumPy
arrays, dicts and lists of them, and registered dataclasses.

Threat model: a model file is untrusted input. Before any allocation the loader checks the
archive's layout (only uncompressed ``.npy`` members, their declared sizes summing to at most
the file's size, at most :data:`MAX_ARRAYS` of them) and each array's declared dtype (numbers
and booleans only: no object arrays, so no pickle) and shape (its byte count equals the
member's); a header nested deeper than :data:`MAX_DEPTH` is refused. Memory used is thus
linear in the file's size. Every failure is a :class:`~veil.errors.DataError` (bad file)
or :class:`~veil.errors.ConfigError` (bad call) with veil's own message. A model's
``ledger_`` (the Ledger its training was charged to) is recorded in the metadata (its file
and the spend) rather than stored. A torch network is stored as its ``state_dict``; its
architecture is code, so :func:`load_model` loads the weights into a ``module`` you pass.

``encoding`` describes, column by column, how a raw table becomes the feature matrix
(:func:`encode_table`): ``{"column": c, "kind": "range", "low": lo, "high": hi}`` (clip,
then scale to [0, 1]), ``"bounds"`` (the same, then to [-1, 1]: declared feature bounds,
:mod:`veil.datasets.bounds`; version 2), ``"log"`` (``log1p(clip(x, 0, high)) /
log1p(high)``), ``"scale"`` (``x * factor``), ``"onehot"`` (over ``categories``) or
``"raw"`` (the number as it is). The version in the header rises with any change a reader
must know about; a file of a newer version is refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from tokenize import TokenError
from typing import Any

import numpy as np

from veil._json import to_jsonable
from veil.errors import ConfigError, DataError

__all__ = ["FORMAT", "MAX_ARRAYS", "MAX_DEPTH", "NPY_ARRAY", "VERSION", "ModelFile",
           "encode_table", "encoded_names", "load_model", "read_arrays", "register_model_class",
           "save_model"]

FORMAT = "veil-model"
VERSION = 2
#: the most arrays a model file may hold, and the deepest nesting of its JSON header
MAX_ARRAYS = 4096
MAX_DEPTH = 64
_HEADER = "veil.json"
_TORCH = "torch.nn.Module"
#: the dtype kinds an array may have: booleans, integers, floats, complex numbers
_KINDS = "biufc"
_CLASSES: dict[str, type] = {}


def register_model_class(cls: type) -> type:
    """Let model files name ``cls`` (a veil estimator, or a dataclass of learned state).

    Called by the module that defines ``cls`` (usable as a class decorator), so the registry
    holds exactly the classes of the modules imported; a name registered twice is a
    :class:`~veil.errors.ConfigError`.
    """
    name = _class_name(cls) if isinstance(cls, type) else repr(cls)
    if not isinstance(cls, type) or not name.startswith("veil."):
        raise ConfigError(f"register_model_class: {name} is not a class defined in veil; only "
                          "veil's own classes may be named by a model file")
    if name in _CLASSES:
        raise ConfigError(f"register_model_class: {name!r} is already registered")
    _CLASSES[name] = cls
    return cls


@dataclasses.dataclass
class ModelFile:
    """A loaded model file: the model and the header's ``metadata``."""

    model: Any
    metadata: dict[str, Any]
    version: int = VERSION


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _qualname(obj: Any) -> str:
    return _class_name(type(obj))


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


def _decode(value: Any, arrays: Mapping[str, np.ndarray], depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise DataError(f"model file: values nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):  # plain JSON lists (metadata-like parameters)
        return [_decode(v, arrays, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1 and "__dataclass__" not in value:
        raise DataError(f"model file: unknown value with keys {sorted(value)[:5]!r}")
    kind, body = next(iter(value.items())) if len(value) == 1 else ("__dataclass__", None)

    def _expect(types: type | tuple[type, ...], what: str) -> Any:
        if not isinstance(body, types):
            raise DataError(f"model file: {kind} holds {type(body).__name__}, not {what}")
        return body

    if kind == "__array__":
        name = _expect(str, "an array name")
        if name not in arrays:
            raise DataError(f"model file: array {name!r} is missing")
        return arrays[name]
    if kind == "__float__":
        text = _expect(str, "a number")
        if text not in ("inf", "-inf", "nan"):
            raise DataError(f"model file: __float__ {text[:20]!r} is not inf, -inf or nan")
        return float(text)
    if kind == "__dict__":
        return {k: _decode(v, arrays, depth + 1) for k, v in _expect(dict, "a dict").items()}
    if kind == "__items__":
        pairs = _expect(list, "a list of pairs")
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise DataError("model file: __items__ holds something other than [key, value] pairs")
        out = {}
        for k, v in pairs:
            key = _decode(k, arrays, depth + 1)
            try:
                out[key] = _decode(v, arrays, depth + 1)
            except TypeError:
                raise DataError(f"model file: dict key of type {type(key).__name__} is not "
                                "allowed") from None
        return out
    if kind == "__list__":
        return [_decode(v, arrays, depth + 1) for v in _expect(list, "a list")]
    if kind == "__tuple__":
        return tuple(_decode(v, arrays, depth + 1) for v in _expect(list, "a list"))
    if kind == "__dataclass__":
        cls = _model_class(value["__dataclass__"])
        fields = value.get("fields")
        if set(value) != {"__dataclass__", "fields"} or not isinstance(fields, dict):
            raise DataError(f"model file: dataclass {value['__dataclass__']!r} needs exactly "
                            "'fields' (a dict)")
        if not dataclasses.is_dataclass(cls):
            raise DataError(f"model file: {value['__dataclass__']!r} is not a dataclass")
        return _build(cls, {k: _decode(v, arrays, depth + 1) for k, v in fields.items()})
    raise DataError(f"model file: unknown value {kind[:40]!r}")


def _model_class(name: Any) -> type:
    """The registered class called ``name`` (``module.QualName``); anything else is refused."""
    if not isinstance(name, str) or name not in _CLASSES:
        shown = repr(name)[:120]
        raise DataError(f"model file: class {shown} is not a registered veil model class "
                        f"(registered: {sorted(_CLASSES)}); only veil's own models are "
                        "loaded, and only those of the veil packages imported")
    return _CLASSES[name]


def _build(cls: type, kwargs: dict[str, Any]) -> Any:
    """``cls(**kwargs)``; a constructor refusing the file's arguments is the file's fault."""
    if not all(isinstance(k, str) and k.isidentifier() for k in kwargs):
        raise DataError(f"model file: {_class_name(cls)} argument names must be identifiers")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, ConfigError) as exc:
        raise DataError(f"model file: cannot rebuild {_class_name(cls)} ({exc})") from None


# -- read_arrays: the one reader of arrays from a file (models, a run's scores, data) --------

#: the key of a ``.npy`` file's one array in :func:`read_arrays`'s answer
NPY_ARRAY = "array"
_NPY_MAGIC, _ZIP_MAGICS = b"\x93NUMPY", (b"PK\x03\x04", b"PK\x05\x06")


def read_arrays(path: str | os.PathLike, *, what: str = "a .npy or .npz file of arrays",
                names: Sequence[str] = (), deflated: bool = True) -> dict[str, np.ndarray]:
    """The arrays of the ``.npy`` file (under the key :data:`NPY_ARRAY`) or ``.npz``
    archive at ``path``, read without running anything from the file: each array's header
    is parsed and checked before its memory is allocated (numbers and booleans only, so no
    object array and no pickle; its byte count equals what the file holds), at most
    :data:`MAX_ARRAYS` of them. ``names``: arrays that must be there. ``deflated``: admit
    compressed members (``numpy.savez_compressed``); without it (model files: the module
    docstring's threat model) members must be stored, their sizes summing to at most the
    file's, so memory stays linear in the file's size.

    Anything else -- a pickle, an object array, a text file, a broken archive -- is a
    :class:`~veil.errors.DataError` in veil's words, ``"PATH is not WHAT: why"``; numpy's
    advice to load a file "unsafely using allow_pickle=" never reaches the user.
    """
    path = Path(path)
    not_what = f"{path} is not {what}"
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
            if magic == _NPY_MAGIC:
                fh.seek(0)
                arrays = {NPY_ARRAY: _read_npy(fh, path.stat().st_size, path.name)}
    except IsADirectoryError:
        raise DataError(f"{not_what}: it is a directory") from None
    except OSError as exc:
        raise DataError(f"{not_what}: it cannot be read ({exc.strerror or exc})") from None
    except DataError as exc:
        raise DataError(f"{not_what}: {exc}") from None
    if magic != _NPY_MAGIC:
        if magic[:4] not in _ZIP_MAGICS:
            raise DataError(f"{not_what}: " + (
                "it is a Python pickle, which veil never loads (unpickling runs code from "
                "the file)" if magic[:1] == b"\x80" else
                "it is neither a .npy file nor an .npz archive"))
        try:
            arrays = _read_npz(path, deflated)
        except DataError as exc:
            raise DataError(f"{not_what}: {exc}") from None
        except (OSError, ValueError, EOFError, RuntimeError, NotImplementedError,
                zipfile.BadZipFile, zipfile.LargeZipFile):  # zipfile's words are not veil's
            raise DataError(f"{not_what}: it is not a readable .npz archive") from None
    missing = [n for n in names if n not in arrays]
    if missing:
        raise DataError(f"{not_what}: it has no array {', '.join(map(repr, missing))} "
                        f"(it holds {sorted(arrays)})")
    return arrays


def _read_npy(fh: Any, size: int, name: str) -> np.ndarray:
    """One ``.npy`` array from ``fh`` holding ``size`` bytes, checked before allocation."""
    try:  # numpy parses the header's Python literal; it may raise any of these
        version = np.lib.format.read_magic(fh)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(fh)
    except (ValueError, TypeError, SyntaxError, TokenError, RecursionError):
        raise DataError(f"member {name[:80]!r} has no readable .npy header") from None
    if dtype.hasobject or dtype.kind not in _KINDS or dtype.fields:
        raise DataError(f"array {name[:80]!r} has dtype {dtype}; only numbers and booleans "
                        "are allowed (veil never loads Python objects from a file)")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes != size - fh.tell():
        raise DataError(f"array {name[:80]!r} declares shape {shape} ({nbytes} bytes) but "
                        f"holds {size - fh.tell()}")
    data = np.frombuffer(fh.read(nbytes), dtype=dtype)
    return data.reshape(shape, order="F" if fortran else "C").copy()


def _read_npz(path: Path, deflated: bool) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive, each checked by :func:`_read_npy`."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        if len(members) > MAX_ARRAYS:
            raise DataError(f"{len(members)} members, more than MAX_ARRAYS={MAX_ARRAYS}")
        if not deflated and sum(m.file_size for m in members) > path.stat().st_size:
            raise DataError("the members declare more bytes than the file holds")
        for member in members:
            stored = (member.compress_type == zipfile.ZIP_STORED
                      and member.file_size == member.compress_size)
            if not member.filename.endswith(".npy") or not (stored or deflated):
                raise DataError(f"member {member.filename[:80]!r} is not an uncompressed .npy "
                                "array")
            with archive.open(member) as fh:
                arrays[member.filename[:-4]] = _read_npy(fh, member.file_size, member.filename)
    return arrays

# -- end of read_arrays ----------------------------------------------------------------------


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
    each class index), and the privacy spent: that of ``ledger`` (or of the model's own
    ``ledger_``), with the ledger's file, or else ``epsilon``/``delta`` as given (beside a
    ledger's file name, not beside a Ledger: the spend is given once). Extra keyword
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
        if epsilon is not None or delta is not None:
            raise ConfigError(f"epsilon={epsilon!r}, delta={delta!r} are not allowed beside a "
                              "Ledger: the file records the ledger's spend (given once)")
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
    """Read a model file written by :func:`save_model` (checked as the module docstring says).
    A torch model's weights are loaded into ``module`` (same architecture), which is returned
    as the model. Only classes registered by the veil packages imported can be rebuilt."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"model file {str(path)!r} is not an existing file")
    not_veil = f"{path} is not a veil model file"
    arrays = read_arrays(path, what="a veil model file (a .npz archive written by "
                         "veil.learn.model_format.save_model)", deflated=False)
    try:
        header = json.loads(arrays.pop(_HEADER).tobytes().decode("utf-8"))
    except (KeyError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise DataError(f"{not_veil} (no readable {_HEADER})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DataError(f"{not_veil} (format "
                        f"{header.get('format') if isinstance(header, dict) else None!r})")
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise DataError(f"{path}: model format version {version!r}; this veil reads up to "
                        f"{VERSION}: upgrade veil to load it")
    state, params = header.get("state", {}), header.get("params", {})
    metadata, cls_name = header.get("metadata", {}), header.get("class")
    if not (isinstance(state, dict) and isinstance(params, dict) and isinstance(metadata, dict)):
        raise DataError(f"{path}: 'state', 'params' and 'metadata' must be JSON objects")
    try:
        if cls_name == _TORCH:
            return ModelFile(_load_torch(path, state, arrays, module), metadata, version)
        model = _build(_model_class(cls_name), {k: _decode(v, arrays) for k, v in params.items()})
        for key, value in state.items():
            if not (key.endswith("_") and key.isidentifier() and not key.startswith("_")):
                raise DataError(f"learned attribute {key[:80]!r} is not allowed")
            try:
                setattr(model, key, _decode(value, arrays))
            except AttributeError:
                raise DataError(f"learned attribute {key!r} cannot be set") from None
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    return ModelFile(model, metadata, version)


def _load_torch(path: Path, state: dict[str, Any], arrays: Mapping[str, np.ndarray],
                module: Any) -> Any:
    if module is None:
        raise ConfigError(f"{path} holds torch weights: pass module= (the network, same "
                          "architecture) to load them into")
    import torch

    weights = _decode(state.get("state_dict"), arrays)
    if not isinstance(weights, dict) or not all(isinstance(v, np.ndarray)
                                                for v in weights.values()):
        raise DataError("'state_dict' must map names to arrays")
    try:
        module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
    except (RuntimeError, TypeError) as exc:
        raise DataError(f"the weights do not fit module= ({str(exc)[:300]})") from None
    return module


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
        if kind in ("range", "bounds"):
            lo, hi = float(step["low"]), float(step["high"])
            x = (np.clip(x, lo, hi) - lo) / (hi - lo)
            if kind == "bounds":
                x = 2.0 * x - 1.0
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
