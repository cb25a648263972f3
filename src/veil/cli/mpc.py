"""``veil mpc``: secure computation with each party on its own host.

``veil mpc party`` runs one party (its data stays on its host); ``veil mpc logreg`` is the
driver of a session (the hosts file's ``driver`` identity): it sends the instructions and
the dealer's correlated randomness, and sees only what it reveals (the trained model).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer

from veil.cli._output import check_input_file, print_json, print_mapping
from veil.cli.net import CERT, HOSTS, KEY, PARTY, TIMEOUT
from veil.errors import ConfigError, DataError
from veil.learn.model_format import NPY_ARRAY, read_arrays

app = typer.Typer(help="Secure multi-party computation with parties on different hosts.",
                  no_args_is_help=True)


def load_data(specs: list[str]) -> dict[str, np.ndarray]:
    """``NAME=FILE`` pairs -> arrays: a ``.npy`` file, or a numeric CSV with a header (one
    column: a vector; several: a matrix)."""
    data: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--data={spec!r} is not allowed: NAME=FILE")
        if name in data:
            raise ConfigError(f"--data={spec!r} is not allowed: {name!r} is named twice")
        check_input_file(Path(path), "--data")
        if path.endswith(".npy"):
            arrays = read_arrays(path, what=f"--data {name}: a .npy file of numbers")
            if list(arrays) != [NPY_ARRAY]:
                raise DataError(f"--data={spec!r} is an .npz archive; expected a .npy file "
                                "(one array) or a CSV file")
            arr = arrays[NPY_ARRAY]
        else:
            try:
                arr = pd.read_csv(path).to_numpy()
            except (OSError, ValueError) as exc:
                raise DataError(f"--data={spec!r} cannot be read: {exc}") from None
            arr = arr[:, 0] if arr.shape[1] == 1 else arr
            if not (arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.number)):
                raise DataError(f"--data={spec!r} cannot be read: it holds values that are "
                                "not numbers")
        data[name] = arr
    return data


@app.command()
def party(
    hosts_path: str = HOSTS,
    index: str = PARTY,
    data: Annotated[list[str] | None, typer.Option(
        "--data", help="NAME=FILE: an array this party holds (CSV with a header, or .npy); "
                       "repeat for more.")] = None,
    cert: str | None = CERT,
    key: str | None = KEY,
    timeout: float = TIMEOUT,
) -> None:
    """Run one MPC party on this host until the driver ends the session."""
    from veil._validation import check_positive
    from veil.mpc.runtime import serve_party
    from veil.net import Identity, load_hosts
    check_positive(timeout, "--timeout")
    hosts = load_hosts(hosts_path)
    me = hosts.party(index)
    identity = Identity(hosts, me.name, cert, key)
    arrays = load_data(data or [])
    start = time.perf_counter()
    serve_party(hosts, identity, arrays, connect_timeout=timeout)
    print_mapping({"party": str(me), "data": ", ".join(f"{k} {v.shape}" for k, v in
                                                       arrays.items()) or "none",
                   "seconds": round(time.perf_counter() - start, 2)},
                  title="MPC session ended")


@app.command()
def logreg(
    hosts_path: str = HOSTS,
    x: str = typer.Option("X", "--x", help="Name of each party's feature matrix (rows)."),
    y: str = typer.Option("y", "--y", help="Name of each party's label vector (0/1)."),
    max_iter: int = typer.Option(20, "--max-iter", help="Gradient-descent iterations."),
    learning_rate: float = typer.Option(1.0, "--learning-rate", help="Step size."),
    cert: str | None = CERT,
    key: str | None = KEY,
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds a party may stay silent "
                                                          "before it is named."),
    as_json: bool = typer.Option(False, "--json", help="Print the model as JSON."),
) -> None:
    """Drive a secure logistic regression on the rows every party holds (horizontal
    partition); reveal only the trained weights."""
    from veil.mpc import Session, concatenate
    from veil.mpc.models import LogisticRegression
    start = time.perf_counter()
    with Session(runtime="hosts", hosts=hosts_path, cert=cert, key=key,
                 timeout=timeout) as s:
        X = concatenate([s.share_data(x, owner=i) for i in range(s.parties)], axis=0)
        labels = concatenate([s.share_data(y, owner=i) for i in range(s.parties)], axis=0)
        if X.ndim != 2 or labels.shape != (X.shape[0],):
            raise DataError(f"--x {x!r} must be matrices and --y {y!r} vectors of as many "
                            f"rows; got {X.shape} and {labels.shape}")
        model = LogisticRegression(learning_rate=learning_rate, max_iter=max_iter)
        model.fit(X, labels)
        revealed = model.reveal()
        cost = s.cost()
    result = {"rows": X.shape[0], "features": X.shape[1],
              "coef": [round(float(c), 6) for c in revealed.coef_],
              "intercept": round(float(revealed.intercept_), 6),
              "seconds": round(time.perf_counter() - start, 2),
              "bytes_sent": list(cost.sent), "rounds": list(cost.rounds)}
    if as_json:
        print_json(result)
    else:
        print_mapping(result, title="secure logistic regression")
