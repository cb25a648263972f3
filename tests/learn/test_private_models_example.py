"""examples/private_models.py runs end to end without a warning (issue 32): every model is
fitted and charged to one budget, and the non-private yardsticks learn from the same
publicly scaled features (tests/docs/test_docs_code.py checks that no example reads its
ranges from the data)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "private_models.py"
MODELS = ["LogisticRegression (objective perturbation)", "LogisticRegression (DP-SGD)",
          "LinearSVC (Huber hinge)", "GaussianNB", "LinearRegression (0-1 target)",
          "KMeans (k=2, clusters matched to classes)"]


def test_private_models_example_runs_without_warnings():
    # -W error: a library's warning fails the run; stderr also catches logged warnings
    out = subprocess.run([sys.executable, "-W", "error", str(SCRIPT), "--epsilon", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr == ""
    rows = dict(re.findall(r"^  (.+?)\s+accuracy (\d\.\d{3} / \d\.\d{3})$", out.stdout, re.M))
    assert list(rows) == MODELS
    for name, pair in rows.items():
        private, plain = (float(a) for a in pair.split(" / "))
        assert 0.0 <= private <= 1.0, name
        assert plain >= 0.9, f"{name}: the non-private yardstick reaches only {plain}"
    spent, budget = re.search(r"overall ledger: epsilon ([\d.]+) of ([\d.]+) at delta",
                              out.stdout).groups()
    assert float(budget) == 12 and 0 < float(spent) <= 12
