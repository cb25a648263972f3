"""examples/dpsgd_digits.py runs both trainings on its one ledger and warns about nothing
(its second training was refused before: the ledger held one training's delta; each
epoch's loss read with float() tripped a PyTorch warning)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "dpsgd_digits.py"


@pytest.mark.slow  # two trainings in a fresh interpreter: ~13 s CPU, minutes when loaded
def test_dpsgd_example_trains_both_models_on_its_ledger_without_warnings():
    out = subprocess.run([sys.executable, "-W", "always", str(SCRIPT), "--epsilon", "2",
                          "--epochs", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Warning" not in out.stderr, out.stderr
    accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", out.stdout)]
    assert len(accuracies) == 2, out.stdout
    spent = re.search(r"ledger: epsilon ([0-9.]+) spent of 4 at delta 2e-05", out.stdout)
    assert spent is not None, out.stdout
    assert 2.0 < float(spent.group(1)) <= 4.0  # both trainings paid, within the budget
