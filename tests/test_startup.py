"""Importing the federated-learning entry points loads no heavy library (issue 30, start-up).

Flower starts a fresh ClientApp process for every message a node handles, and that process
imports :mod:`veil.experiments.flower_app`; ``import veil.fl`` was 3x ``import flwr`` in CPU
because package ``__init__`` files pulled in scipy, scikit-learn, pandas, pyarrow and
dp_accounting (``fl.federation -> dp.accounting.serialize -> veil.dp -> ledger``). Each
module is imported in a fresh interpreter and the heavy libraries must be absent afterwards:
they load when a function needs them (a ledger charges, a model trains). No timing is
asserted; ``benchmarks/RESULTS.md`` ("Start-up") has the CPU figures.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

HEAVY = ("scipy", "sklearn", "pandas", "pyarrow", "torch", "dp_accounting", "numpy.f2py",
         "matplotlib", "tenseal", "pyspark", "veil.crypto.dkg")
LIGHT = ["veil.fl", "veil.fl.federation", "veil.dp", "veil.dp.accounting", "veil.crypto"]
FLOWER = ["veil.fl.runtime.flower", "veil.experiments.flower_app",
          "veil.fl.runtime.flower_vertical", "veil.experiments.flower_vertical_app"]


def _loaded_after(module: str, code: str = "") -> list[str]:
    """The modules a fresh interpreter holds after ``import module`` (and ``code``)."""
    code = f"import json, sys, {module}\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _heavy(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY]


@pytest.mark.parametrize("module", LIGHT + FLOWER)
def test_importing_loads_no_heavy_library(module):
    if module in FLOWER:
        pytest.importorskip("flwr")
    loaded = _loaded_after(module)
    assert module in loaded
    assert _heavy(loaded) == []


SECAGG_RUN = """
[data]
dataset = "digits"
clients = 4
[model]
type = "softmax_regression"
[training]
rounds = 1
[secagg]
neighbours = 2
identities = "{identities}"
[run]
seed = 1
"""


def test_the_clientapp_process_of_a_secagg_stage_loads_no_heavy_library(tmp_path):
    """What Flower's fresh process for one message of a SecAgg+ stage does: import the
    app's ClientApp module (``veil_app.py`` of ``veil fl app``, which builds the ClientApp
    from the run file) and restore the party from the node's state. The app once imported
    every protocol for its stage names (scipy, scikit-learn, pandas, dp_accounting and
    veil.crypto.dkg in every message's process); the party's model (scikit-learn) loads
    only where it trains."""
    pytest.importorskip("flwr")
    from veil.crypto.identity import write_identities
    from veil.experiments.flower_app import _federation, write_app

    table = write_identities(tmp_path / "identities", 4).resolve()
    config = tmp_path / "run.toml"
    config.write_text(SECAGG_RUN.format(identities=table))
    app = write_app(config, tmp_path / "app")
    _, federation = _federation(config)
    (tmp_path / "party.pkl").write_bytes(pickle.dumps(federation.clients[1]))
    restore = (f"sys.path.insert(0, {str(app)!r}); import veil_app, pickle\n"
               f"party = pickle.loads(open({str(tmp_path / 'party.pkl')!r}, 'rb').read())\n"
               "assert type(party).__name__ == 'SecAggClient', party")
    loaded = _loaded_after("pathlib", restore)
    assert "veil_app" in loaded and "veil.fl.secagg.protocol" in loaded
    assert _heavy(loaded) == []
    # the check can fail: training needs the model, and scikit-learn loads with it
    trained = _loaded_after("pathlib", restore + "\nparty.trainer.model")
    assert "sklearn" in trained


def test_a_heavy_library_loads_when_it_is_used():
    """The check can fail: the exports still work, and load what they need on use."""
    loaded = _loaded_after("veil.dp; veil.dp.Ledger")
    assert "dp_accounting" in loaded and "veil.dp.ledger" in loaded
