"""A real Flower deployment on loopback: SuperLink and three SuperNodes as processes, TLS."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")

from veil.crypto.identity import write_identities  # noqa: E402
from veil.errors import ConfigError  # noqa: E402
from veil.experiments.flower_app import Loopback, _federation, write_app  # noqa: E402

CONFIG = """
[data]
dataset = "digits"
partition = "iid"
clients = 3

[model]
type = "softmax_regression"

[training]
rounds = 1
learning_rate = 0.3
batch_size = 1000          # one full batch per epoch: training is deterministic

[secagg]
bits = 32
clip_range = 2.0
identities = "{identities}"

[run]
seed = 3
timeout = 120
"""


@pytest.mark.slow  # ~85 s: Flower's SuperNodes poll every 3 s, and SecAgg has 5 stages
def test_a_secagg_round_on_a_tls_deployment_gives_the_local_model(tmp_path):
    config = tmp_path / "run.toml"
    keys = tmp_path / "keys"     # each party's identity key, made out of band
    config.write_text(CONFIG.format(identities=write_identities(keys, 3)))
    app = write_app(config, tmp_path / "app", results=tmp_path / "results")
    with Loopback(tmp_path / "deployment", parties=3, identities=keys) as deployment:
        deployment.run(app, timeout=300)
    assert deployment.pids() == []          # every process gone, detached ones too
    (flower,) = json.loads((tmp_path / "results" / "results.json").read_text())["rounds"]
    simulated = tmp_path / "local.toml"   # the same run simulated: the runner makes the keys
    simulated.write_text(CONFIG.replace('identities = "{identities}"\n', ""))
    (local,) = _federation(simulated)[1].run().rounds
    assert flower["status"] == "ok" and flower["aggregated"] == 3
    # the nodes' masks are secure random and differ from the local run's; they cancel
    for key in ("accuracy", "loss", "bytes_up", "bytes_down"):
        assert flower[key] == local[key], key


def test_a_secagg_deployment_needs_an_identity_table(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.replace('identities = "{identities}"\n', ""))
    with pytest.raises(ConfigError, match="identity table"):
        write_app(config, tmp_path / "app")
