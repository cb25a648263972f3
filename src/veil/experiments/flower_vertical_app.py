"""The Flower app of a ``[vertical]`` run file (``veil fl app``): the ServerApp that relays
the run, and the ClientApp each organisation's SuperNode runs, built from its own node
configuration and files. The runtime itself -- what each node hosts, who sees what, the
signed channels -- is :mod:`veil.fl.runtime.flower_vertical`; this module adds what reads
run files (:func:`veil.experiments.fl_config.load_config`), as
:mod:`veil.experiments.flower_app` does for horizontal runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from veil.errors import ConfigError
from veil.experiments.vertical_config import flower_settings, read_party_table
from veil.fl.runtime.flower import ClientApp, Context, Grid, ServerApp
from veil.fl.runtime.flower_vertical import NODE_KEYS, VerticalRelay, client_app
from veil.fl.vertical.parties import VerticalParty, train

__all__ = ["client", "server", "vertical_app"]


_APP = '''"""veil vertical run: the ServerApp and ClientApp for run.toml (veil fl app)."""

from pathlib import Path

from veil.experiments.flower_vertical_app import client as _client, server as _server

CONFIG = Path(__file__).with_name("run.toml")
server = _server(CONFIG)
client = _client(CONFIG)
'''


def vertical_app(config: str | os.PathLike, out_dir: str | os.PathLike,
                 results: str | os.PathLike | None = None) -> Path:
    """Write the Flower app of a ``[vertical]`` run file into ``out_dir`` (as
    :func:`veil.experiments.flower_app.write_app` does for horizontal runs; ``flwr run
    DIR CONNECTION`` submits it); ``results``: where the ServerApp writes results.json."""
    from veil.experiments.fl_config import load_config
    from veil.experiments.flower_app import write_app_files

    config, out_dir = Path(config), Path(out_dir)
    cfg = load_config(config)
    if cfg.kind != "vertical":
        raise ConfigError(f"{config}: a [vertical] run file is needed; this run is {cfg.kind}")
    flower_settings(cfg["vertical"])                  # refuse what Flower cannot run now
    write_app_files(config, out_dir, results, _APP)
    return out_dir


def server(config: str | os.PathLike) -> ServerApp:
    """The ServerApp of a vertical run file: connects the nodes, relays the run and
    writes ``results.json`` and the time of every exchange ``stages.json``
    (:attr:`VerticalRelay.timeline`) into the app config's ``out`` folder."""
    from veil._io import atomic_write
    from veil._json import to_jsonable
    from veil.experiments.fl_config import load_config

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = load_config(config)
        relay = VerticalRelay(grid, flower_settings(cfg["vertical"]),
                              timeout=cfg["run"]["timeout"])
        relay.connect()
        results = train(relay)
        out = Path(str(context.run_config["out"]))
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "results.json", json.dumps(to_jsonable(results), indent=2))
        atomic_write(out / "stages.json", json.dumps(relay.timeline, indent=1))

    return app


def _own_plan(context: Context) -> tuple[dict, dict, Path]:
    """The node's configuration, its own ``[vertical]`` section and the file it is read
    from (``<plans>/<run file name>``; module docstring)."""
    from veil.experiments.fl_config import load_config

    config = dict(context.node_config)
    for key, kind in NODE_KEYS.items():
        value = config.get(key)
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"node config {key}={value!r} is not allowed: expected a "
                              f"{kind.__name__}")
    party, plans = config.get("party"), config.get("plans")
    if party is None or plans is None:
        raise ConfigError("a vertical node needs node config party=NAME and plans=DIR (its "
                          "own copies of the run files)")
    name = Path(str(context.run_config.get("plan", ""))).name
    plan_file = Path(plans) / name
    if not name or not plan_file.is_file():
        raise ConfigError(f"party {party!r} has no plan {name!r} in its plans folder {plans}: "
                          "it refuses a run it was not configured for")
    return config, load_config(plan_file)["vertical"], plan_file


def _node_party(context: Context) -> VerticalParty:
    """The node's party from its own node configuration and files (module docstring)."""
    from veil.crypto.identity import read_key, read_table

    config, section, plan_file = _own_plan(context)
    party, data = config["party"], config.get("data")
    table = (None if data is None
             else read_party_table(data, plan_file.parent, f"party {party!r} data"))
    key, identities = config.get("identity-key"), section.get("identities")
    return VerticalParty(party, flower_settings(section), table, ledger=config.get("ledger"),
                         out=config.get("out"), identity=key and read_key(key),
                         identities=identities and read_table(plan_file.parent / identities))


def client(config: str | os.PathLike) -> ClientApp:
    """The ClientApp of a vertical run: the node hosts the party its node configuration
    names, built from its own plan copy and table. ``config`` (the copy the server sent)
    is never read by a party."""
    return client_app(_node_party, lambda context: flower_settings(_own_plan(context)[1]))
