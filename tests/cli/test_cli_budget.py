"""``veil budget show`` and ``veil budget calibrate``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import dp_accounting as dpa
import pytest

from veil.cli.main import main
from veil.dp import Ledger
from veil.dp.accounting import epsilon_for, make_accountant


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_show_reports_charges_deltas_and_children(tmp_path, capsys):
    path = str(tmp_path / "b.db")
    with Ledger(3.0, 1e-5, path=path) as ledger:
        ledger.charge(dpa.LaplaceDpEvent(10.0), label="count")
        ledger.child("sensitive", 1.0).charge(dpa.GaussianDpEvent(5.0), label="mean",
                                              delta=1e-6)
        expected = ledger.spent()[0]
    code, out, _ = _run(capsys, "budget", "show", path, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["spent_epsilon"] == pytest.approx(expected)
    assert data["remaining_epsilon"] == pytest.approx(3.0 - expected)
    assert [h["label"] for h in data["history"]] == ["count", "mean"]
    assert data["children"][0]["name"] == "sensitive"
    eps = [data["epsilon_at_delta"][k] for k in ("0.001", "1e-05", "1e-07", "1e-09")]
    # the default filter prices each block at its own delta (the Gaussian's 1e-6): at
    # least that delta the blocks add up; below it nothing can be certified
    assert eps[0] == eps[1] == pytest.approx(expected) and eps[2:] == ["inf", "inf"]
    assert data["epsilon_at_delta"]["0"] == "inf"  # the Gaussian is not pure DP
    code, out, _ = _run(capsys, "budget", "show", path, "--last", "1")
    assert code == 0 and "mean" in out and "remaining_epsilon" in out


def test_show_works_on_a_file_written_by_a_killed_process(tmp_path, capsys):
    path = str(tmp_path / "killed.db")
    script = textwrap.dedent("""
        import sys
        import dp_accounting as dpa
        from veil.dp import Ledger
        ledger = Ledger(100.0, 1e-5, path=sys.argv[1])
        while True:
            ledger.charge(dpa.LaplaceDpEvent(1000.0), label="step")
            print("charged", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, path], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        seen = sum(1 for _, _ in zip(range(15), proc.stdout))
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    code, out, _ = _run(capsys, "budget", "show", path, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["charges"] >= seen == 15
    acc = make_accountant("pld")
    for _ in range(15):  # the 15 charges the process reported, composed as the ledger does
        acc.compose(dpa.LaplaceDpEvent(1000.0))
    assert data["spent_epsilon"] >= acc.get_epsilon(1e-5)
    assert data["epsilon_at_delta"]["0"] >= 15 * 0.001 * (1 - 1e-12)  # pure DP: k / b


def test_calibrate_reaches_the_target(capsys):
    code, out, _ = _run(capsys, "budget", "calibrate", "--epsilon", "3", "--delta", "1e-5",
                        "--sample-rate", "0.004267", "--steps", "14062", "--json")
    assert code == 0
    data = json.loads(out)
    sigma = data["noise_multiplier"]
    assert epsilon_for(sigma, 1e-5, 0.004267, 14062) <= 3.0 == data["target_epsilon"]
    # the default accountant (PLD) is the default ledger's: 0.969, not RDP's 1.0145
    assert data["epsilon"] <= 3.0 and sigma == pytest.approx(0.9687, abs=2e-3)


@pytest.mark.parametrize("args, message", [
    (["--epsilon", "3", "--delta", "1", "--steps", "10"], "delta"),
    (["--epsilon", "3", "--delta", "1e-5", "--sample-rate", "-0.1"], "sample_rate"),
    (["--epsilon", "3", "--delta", "1e-5", "--steps", "0"], "steps"),
    (["--epsilon", "3", "--delta", "1e-5", "--accountant", "gdp"], "approximation"),
])
def test_calibrate_bad_input(capsys, args, message):
    code, _, err = _run(capsys, "budget", "calibrate", *args)
    assert code == 2 and message in err and "Traceback" not in err


def test_show_refuses_corrupt_and_missing_files(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 64)
    code, _, err = _run(capsys, "budget", "show", str(bad))
    assert code == 2 and "not a usable veil ledger" in err
    assert bad.read_bytes() == b"\x00garbage" * 64
    code, _, err = _run(capsys, "budget", "show", str(tmp_path / "none.db"))
    assert code == 2 and "not an existing ledger file" in err
