"""The millionaires' and auction examples run end to end and check their own answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(*args: str) -> str:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_millionaires_example_all_pairs():
    out = _run(str(EXAMPLES / "millionaires.py"), "--alice", "3", "--bob", "8", "--bits",
               "512", "--all")
    assert out.count("Alice is poorer than Bob") == 2
    assert "all 100 pairs: Yao correct, MPC correct" in out


def test_auction_example_reveals_winner_and_price():
    out = _run(str(EXAMPLES / "auction.py"), "--bids", "40", "75", "12", "60", "--price",
               "second")
    assert "revealed: bidder 1 wins and pays 60" in out
    assert "check against the plaintext bids: correct" in out
