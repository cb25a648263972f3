"""``veil demo``: the hybrid approach beside its baselines (quick mode: small test key)."""

import json

import pytest

from veil.cli.main import main
from veil.experiments.demo import run_demo


def test_demo_runs_every_method_and_stays_within_budget():
    report = run_demo(quick=True, key_bits=512, rng=3)
    assert (report.parties, report.trust, report.threshold) == (10, 5, 6)
    assert len(report.runs) == 10
    tasks = {r.task for r in report.runs}
    assert len(tasks) == 2
    for task in tasks:
        runs = {r.method: r for r in report.runs if r.task == task}
        assert set(runs) == {"none", "smc", "central", "hybrid", "local"}
        # encryption costs bytes; exact methods agree exactly (same integer sums)
        assert runs["smc"].bytes_up > runs["none"].bytes_up
        assert runs["smc"].accuracy == runs["none"].accuracy
        for m in ("central", "hybrid", "local"):
            assert 0 < runs[m].epsilon <= 1.0 + 1e-9
        assert runs["none"].epsilon == runs["smc"].epsilon == 0.0


def test_demo_cli_json(capsys):
    assert main(["demo", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["key_bits"] == 512 and len(out["runs"]) == 10
    assert {r["method"] for r in out["runs"]} == {"none", "smc", "central", "hybrid", "local"}


@pytest.mark.slow
def test_full_demo_with_2048_bit_keys(capsys):
    assert main(["demo"]) == 0
    assert "2048 bits" in capsys.readouterr().out
