"""``veil predict MODEL DATA.csv``: apply a saved model (:mod:`veil.learn.model_format`) to a table.

The model file says how its features come from raw columns (its ``encoding``; else its
``feature_names`` are read as numeric columns); each row gets the predicted class (its label
when the file names the labels). Predicting spends no privacy budget: the model is already
released.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer

from veil.cli._output import check_input_file, print_json, print_table, say
from veil.cli.dp import read_csv
from veil.errors import ConfigError, DataError


def _features(table: pd.DataFrame, metadata: dict) -> np.ndarray:
    from veil.learn.model_format import encode_table

    if metadata.get("encoding"):
        return encode_table(table, metadata["encoding"])
    names = metadata.get("feature_names")
    if names:
        return encode_table(table, [{"column": n, "kind": "raw"} for n in names])
    numeric = table.select_dtypes("number")
    other = list(table.columns.difference(numeric.columns))
    if other:
        raise DataError("the model file names no features, so every column of DATA must be "
                        f"numeric; these are not: {other}")
    return numeric.to_numpy(dtype=np.float64)


def load_model_file(path: Path):
    """:func:`veil.learn.model_format.load_model` with every veil model class registered: the
    modules that define them register them when imported (the format imports nothing by a
    name read from a file), so this imports each module that calls ``register_model_class``
    (tests/cli/test_cli_adoption.py checks the list is complete)."""
    import veil.learn.linear  # noqa: F401 - the models in the clear
    import veil.learn.private.kmeans  # noqa: F401 - the private models
    import veil.learn.private.linear  # noqa: F401
    import veil.learn.private.linear_regression  # noqa: F401
    import veil.learn.private.naive_bayes  # noqa: F401
    import veil.learn.tree  # noqa: F401 - ID3 trees and their nodes
    import veil.mpc.models  # noqa: F401 - RevealedModel
    from veil.learn.model_format import load_model

    return load_model(path)


def predict(
    model: Annotated[Path, typer.Argument(help="A model file written by veil (model.npz).")],
    data: Annotated[Path, typer.Argument(help="A CSV table of raw records (separator "
                                         "detected).")],
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write DATA with a 'prediction' column here (CSV).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")
                     ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the predictions as JSON.")
                     ] = False,
) -> None:
    """Predict the class of every row of DATA.csv with a saved model."""
    check_input_file(model, "MODEL")
    if out is not None and out.exists() and (out.is_dir() or not force or
                                             out.resolve() == data.resolve()):
        raise ConfigError(f"--out={str(out)!r} exists: choose another name"
                          + (", or pass --force" if out.is_file() else ""))
    loaded = load_model_file(model)
    table = read_csv(data, "DATA")
    X = _features(table, loaded.metadata)
    expected = getattr(loaded.model, "n_features_in_", X.shape[1])
    if X.shape[1] != expected:
        raise DataError(f"DATA gives {X.shape[1]} features; the model takes {expected}")
    predicted = np.asarray(loaded.model.predict(X))
    labels = loaded.metadata.get("labels")
    if labels and np.issubdtype(predicted.dtype, np.integer) and predicted.size and \
            0 <= predicted.min() and predicted.max() < len(labels):
        predicted = np.asarray(labels, dtype=object)[predicted]
    if out is not None:
        table.assign(prediction=predicted).to_csv(out, index=False)
    if json_:
        print_json({"model": str(model), "rows": len(predicted),
                    "predictions": predicted.tolist(), "metadata": loaded.metadata})
        return
    values, counts = np.unique(predicted.astype(str), return_counts=True)
    meta = loaded.metadata
    spent = "no privacy certified" if meta.get("epsilon") is None else \
        f"certified epsilon {meta['epsilon']:.3g}, delta {meta.get('delta', 0):g}"
    print_table(zip(values, counts), ["prediction", "rows"],
                title=f"{len(predicted)} rows of {data.name} ({spent})")
    if out is not None:
        say(f"predictions written to {out}")
