"""The record of a federated run: metrics per round, JSON output and a plot."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._json import to_jsonable

__all__ = ["History"]


@dataclass
class History:
    """Per-round metrics (one dict per round, in order) and the final global parameters.

    Each record holds ``round``, ``status`` ("ok" or "aborted"), ``accuracy`` and ``loss``
    on the test data (when given), ``epsilon``/``delta`` spent so far (DP runs),
    ``sampled``/``aggregated`` client counts, ``dropped``, ``rejected``, ``bytes_up``,
    ``bytes_down``, ``time`` (wall seconds), ``server_cpu`` and ``client_cpu`` (seconds,
    mean per participating client) and the protocol's own metrics.
    """

    rounds: list[dict[str, Any]] = field(default_factory=list)
    params: np.ndarray | None = None

    def metric(self, name: str) -> list[Any]:
        """One metric across rounds (None where absent)."""
        return [r.get(name) for r in self.rounds]

    def to_dict(self) -> dict[str, Any]:
        last = self.rounds[-1] if self.rounds else {}
        summary = {
            "rounds": len(self.rounds),
            "completed": sum(r.get("status") == "ok" for r in self.rounds),
            "accuracy": last.get("accuracy"),
            "epsilon": last.get("epsilon"),
            "delta": last.get("delta"),
            "bytes": sum(r.get("bytes_up", 0) + r.get("bytes_down", 0) for r in self.rounds),
            "time": sum(r.get("time", 0.0) for r in self.rounds),
        }
        return to_jsonable({"summary": summary, "rounds": self.rounds,
                       "params": None if self.params is None else self.params})

    def save_json(self, path: str | os.PathLike) -> None:
        """Write the JSON atomically (a temporary file renamed over ``path``)."""
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2)
        os.replace(tmp, path)

    def plot(self, path: str | os.PathLike, *, title: str | None = None) -> None:
        """A PNG of test accuracy (left axis) and epsilon spent (right axis) per round."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        rounds = [r["round"] + 1 for r in self.rounds]
        acc = [np.nan if r.get("accuracy") is None else r["accuracy"] for r in self.rounds]
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ax.plot(rounds, acc, marker="o", color="tab:blue", label="test accuracy")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy", color="tab:blue")
        eps = [r.get("epsilon") for r in self.rounds]
        if any(e is not None for e in eps):
            ax2 = ax.twinx()
            ax2.plot(rounds, [np.nan if e is None else e for e in eps], marker="s",
                     color="tab:red", label="epsilon spent")
            ax2.set_ylabel("epsilon spent", color="tab:red")
        ax.set_title(title or "federated training")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
