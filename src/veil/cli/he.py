"""``veil he``: linear regression on CKKS-encrypted CSV data, keys and ciphertexts in files.

The owner runs keygen, encrypt and decrypt with the secret context; the server runs train
and predict with the public one. ``train --solver closed_form`` needs the owner's answer to
one masked question: given ``--owner-key`` the command plays both roles in one process.
The defaults work together: ``keygen`` makes a ``depth18`` key, and ``train`` runs gradient
descent for all the iterations that key allows with one level left for ``predict`` (15),
with the step sizes the owner computed and encrypted with the data (:mod:`veil.he.linear`,
(b)).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import typer

from veil.cli._output import check_new_files, console, print_json, print_mapping, say_replaced
from veil.errors import ConfigError, DataError

app = typer.Typer(help="Homomorphic encryption: encrypted linear regression (CKKS).",
                  no_args_is_help=True)

_PRESETS = ("depth2", "depth7", "depth18")

FORCE = typer.Option(False, "--force", help="Replace an existing --out file (it is named).")


def _context(path: str):
    from veil.he.ckks import CKKSContext
    return CKKSContext.from_bytes(_read(path))


def _write(path: str, data: bytes) -> None:
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise DataError(f"cannot write {path}: {exc.strerror}") from None


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None


def _csv(path: str, target: str | None) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read CSV {path}: {exc}") from None
    if target is not None and target not in frame.columns:
        raise DataError(f"target={target!r} is not a column of {path}: "
                        f"{', '.join(frame.columns)}")
    y = None if target is None else frame.pop(target).to_numpy(dtype=float)
    try:
        X = frame.to_numpy(dtype=float)
    except ValueError:
        raise DataError(f"{path} has non-numeric columns; encode them first") from None
    return X, y, list(frame.columns)


@app.command()
def keygen(
    out: str = typer.Option(..., "--out", help="Directory for secret.ctx and public.ctx."),
    preset: str = typer.Option("depth18", "--preset",
                               help="depth18 (N=32768: 16 GD iterations, what train's "
                                    "defaults use; key files of ~3 GB each), depth7 "
                                    "(N=16384: 5), depth2 (N=8192: closed form only, the "
                                    "fastest): all 128-bit."),
    force: bool = typer.Option(False, "--force", help="Replace an existing secret.ctx and "
                               "public.ctx (they are named)."),
) -> None:
    """A CKKS key pair: secret.ctx (keep it) and public.ctx (for the server)."""
    from veil._io import write_private
    from veil._validation import check_choice
    from veil.he.ckks import CKKSContext
    check_choice(preset, "preset", _PRESETS)
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out={out!r} is an existing file; expected a folder")
    replaced = check_new_files([folder / "secret.ctx", folder / "public.ctx"], force=force)
    start = time.perf_counter()
    ctx = CKKSContext.preset(preset, rotations=[-(1 << k) for k in range(2, 7)])
    folder.mkdir(parents=True, exist_ok=True)
    write_private(folder / "secret.ctx", ctx.to_bytes(secret=True), force=force,
                  what="--out secret.ctx")
    (folder / "public.ctx").write_bytes(ctx.public().to_bytes())
    print_mapping({"context": repr(ctx), "secret": str(folder / "secret.ctx"),
                   "public": str(folder / "public.ctx"),
                   "seconds": time.perf_counter() - start}, title="veil he keygen")
    say_replaced(replaced)


@app.command()
def encrypt(
    key: str = typer.Option(..., "--key", help="The owner's secret.ctx."),
    data: str = typer.Option(..., "--data", help="CSV with a header."),
    out: str = typer.Option(..., "--out", help="Encrypted output file."),
    target: str = typer.Option(None, "--target",
                               help="Training: the label column (encrypts X and y)."),
    model: str = typer.Option(None, "--model",
                               help="Prediction: the model file whose feature scales to use."),
    force: bool = FORCE,
) -> None:
    """Encrypt a training set (--target) or rows to predict (--model)."""
    from veil.he.linear import DataOwner, EncryptedModel
    replaced = check_new_files([out], force=force)
    ctx = _context(key)
    owner = DataOwner(ctx)
    if (target is None) == (model is None):
        raise DataError("give exactly one of --target (training data) or --model (rows to "
                        "predict)")
    X, y, columns = _csv(data, target)
    if target is not None:
        blob = owner.encrypt_training(X, y).to_bytes()
    else:
        scales = EncryptedModel.from_bytes(_read(model), ctx).x_scale
        blob = owner.encrypt_rows(X, scales).to_bytes()
    _write(out, blob)
    say_replaced(replaced)
    print_mapping({"rows": len(X), "features": len(columns), "plaintext_bytes": X.nbytes +
                   (0 if y is None else y.nbytes), "ciphertext_bytes": len(blob),
                   "expansion": len(blob) / (X.nbytes + (0 if y is None else y.nbytes))},
                  title=f"encrypted {data}")


@app.command()
def train(
    key: str = typer.Option(..., "--key", help="The server's public.ctx."),
    data: str = typer.Option(..., "--data", help="Encrypted training set."),
    out: str = typer.Option(..., "--out", help="Encrypted model file."),
    alpha: float = typer.Option(0.0, "--alpha", help="Ridge penalty (0: least squares)."),
    solver: str = typer.Option("gd", "--solver", help="gd (server alone) or closed_form."),
    iterations: int = typer.Option(None, "--iterations",
                                   help="GD iterations (default: all the key's depth allows "
                                        "with one level left to predict, depth - 3: 15 for "
                                        "depth18)."),
    learning_rate: float = typer.Option(None, "--learning-rate",
                                        help="GD: one public step on the scaled data "
                                             "(default: the owner's encrypted "
                                             "preconditioned steps)."),
    owner_key: str = typer.Option(None, "--owner-key",
                                   help="closed_form: the owner's secret.ctx (both roles in "
                                        "this process)."),
    force: bool = FORCE,
) -> None:
    """Train on the encrypted set; writes E(w) (the server never decrypts)."""
    from veil.he.linear import DataOwner, EncryptedLinearRegression, EncryptedTrainingSet
    replaced = check_new_files([out], force=force)
    server_ctx = _context(key)
    ctx = _context(owner_key) if owner_key is not None else server_ctx  # a depth18 key: GBs
    if server_ctx.fingerprint != ctx.fingerprint:
        raise DataError("--owner-key and --key belong to different key pairs")
    owner = DataOwner(ctx) if owner_key is not None else None
    enc = EncryptedTrainingSet.from_bytes(_read(data), ctx)
    if iterations is None and solver == "gd":
        # G and M take two levels, each iteration one, and `veil he predict` one more
        iterations = ctx.depth - 3
        if iterations < 1:
            raise ConfigError(f"the key has depth {ctx.depth}, which leaves no GD iteration "
                              "(G and M take two levels, prediction one): make the key with "
                              "--preset depth18 (the default) or train with --solver "
                              "closed_form --owner-key")
    start = time.perf_counter()
    model = EncryptedLinearRegression(alpha, solver=solver, learning_rate=learning_rate,
                                      owner=owner, **({} if iterations is None else
                                                      {"max_iter": iterations})).fit(enc)
    seconds = time.perf_counter() - start
    _write(out, model.encrypted_model_.to_bytes())
    say_replaced(replaced)
    print_mapping({"solver": solver, "iterations": iterations if solver == "gd" else None,
                   "rows": enc.n, "features": enc.d, "seconds": seconds,
                   "levels_left": model.model_.level, "model": str(out)}, title="veil he train")


@app.command()
def predict(
    key: str = typer.Option(..., "--key", help="The server's public.ctx."),
    model: str = typer.Option(..., "--model", help="Encrypted model file."),
    data: str = typer.Option(..., "--data", help="Encrypted rows (veil he encrypt --model)."),
    out: str = typer.Option(..., "--out", help="Encrypted predictions file."),
    force: bool = FORCE,
) -> None:
    """E(X w) from the encrypted model and encrypted rows."""
    from veil.he.linear import EncryptedLinearRegression, EncryptedModel, EncryptedRows
    replaced = check_new_files([out], force=force)
    ctx = _context(key)
    est = EncryptedLinearRegression.from_encrypted_model(
        EncryptedModel.from_bytes(_read(model), ctx))
    rows = EncryptedRows.from_bytes(_read(data), ctx)
    _write(out, est.predict(rows).to_bytes())
    say_replaced(replaced)
    console.print(f"wrote {rows.n} encrypted predictions to {out}", highlight=False)


@app.command()
def decrypt(
    key: str = typer.Option(..., "--key", help="The owner's secret.ctx."),
    predictions: str = typer.Option(None, "--predictions", help="Encrypted predictions."),
    model: str = typer.Option(None, "--model", help="Encrypted model (prints coefficients)."),
    out: str = typer.Option(None, "--out", help="CSV for the predictions."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
    force: bool = FORCE,
) -> None:
    """Decrypt predictions (to CSV) or a model (coefficients)."""
    from veil.he.linear import (
        DataOwner,
        EncryptedLinearRegression,
        EncryptedModel,
        EncryptedPredictions,
    )
    if (predictions is None) == (model is None):
        raise DataError("give exactly one of --predictions or --model")
    replaced = check_new_files([] if out is None else [out], force=force)
    ctx = _context(key)
    owner = DataOwner(ctx)
    if predictions is not None:
        pred = owner.decrypt_predictions(EncryptedPredictions.from_bytes(_read(predictions),
                                                                         ctx))
        if out is not None:
            _write(out, pd.DataFrame({"prediction": pred}).to_csv(index=False).encode())
            say_replaced(replaced)
        result = {"count": int(pred.size), "first": pred[:5].tolist(),
                  "out": None if out is None else str(out)}
    else:
        est = EncryptedLinearRegression.from_encrypted_model(
            EncryptedModel.from_bytes(_read(model), ctx), owner=owner)
        result = {"coef": est.coef_.tolist(), "intercept": est.intercept_}
    if json_:
        print_json(result)
    else:
        print_mapping(result, title="veil he decrypt")
