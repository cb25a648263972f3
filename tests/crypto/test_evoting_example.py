"""The e-voting example runs end to end and its tally checks out (small key for speed)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "evoting.py"


def test_evoting_example_tally_matches():
    out = subprocess.run([sys.executable, str(SCRIPT), "--bits", "512", "--voters", "12",
                          "--candidates", "4", "--trustees", "4", "--quorum", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "12 valid, 1 rejected" in out.stdout
    assert "matches the votes cast" in out.stdout
