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
import subprocess
import sys

import pytest

HEAVY = ("scipy", "sklearn", "pandas", "pyarrow", "torch", "dp_accounting", "numpy.f2py",
         "matplotlib", "tenseal", "pyspark", "veil.crypto.dkg")
LIGHT = ["veil.fl", "veil.fl.federation", "veil.dp", "veil.dp.accounting", "veil.crypto"]
FLOWER = ["veil.fl.runtime.flower", "veil.experiments.flower_app"]


def _loaded_after(module: str) -> list[str]:
    """The modules a fresh interpreter holds after ``import module``."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("module", LIGHT + FLOWER)
def test_importing_loads_no_heavy_library(module):
    if module in FLOWER:
        pytest.importorskip("flwr")
    loaded = _loaded_after(module)
    assert module in loaded
    assert [m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY] == []


def test_a_heavy_library_loads_when_it_is_used():
    """The check can fail: the exports still work, and load what they need on use."""
    loaded = _loaded_after("veil.dp; veil.dp.Ledger")
    assert "dp_accounting" in loaded and "veil.dp.ledger" in loaded
