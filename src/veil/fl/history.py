"""The record of a federated run: metrics per round, JSON output and a plot."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._io import atomic_write
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
    #: the DP noise came from the seed: a simulation, its epsilon not certified
    simulated_noise: bool = False

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
        if self.simulated_noise:
            summary["epsilon_certified"] = False
            summary["note"] = "simulation: DP noise drawn from the seed; epsilon not certified"
        return to_jsonable({"summary": summary, "rounds": self.rounds,
                       "params": None if self.params is None else self.params})

    def save_json(self, path: str | os.PathLike) -> None:
        atomic_write(path, json.dumps(self.to_dict(), indent=2))

    def plot(self, path: str | os.PathLike, *, title: str | None = None,
             budget: float | None = None) -> None:
        """A PNG of test accuracy (left axis) and epsilon spent (right axis) per round, the
        rounds numbered as in the tables (from 0), with the ``budget`` epsilon as a line."""
        from matplotlib.ticker import MaxNLocator

        from veil import _plotting

        plt = _plotting.pyplot()
        rounds = [r["round"] for r in self.rounds]
        acc = [np.nan if r.get("accuracy") is None else r["accuracy"] for r in self.rounds]
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        ax.plot(rounds, acc, marker="o", color="tab:blue", label="test accuracy")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy", color="tab:blue")
        eps = [r.get("epsilon") for r in self.rounds]
        handles = ax.get_legend_handles_labels()
        if any(e is not None for e in eps) or budget is not None:
            ax2 = ax.twinx()
            ax2.plot(rounds, [np.nan if e is None else e for e in eps], marker="s",
                     color="tab:red", label="epsilon spent")
            if budget is not None:
                ax2.axhline(budget, color="tab:red", linestyle="--", lw=1,
                            label=f"budget epsilon = {budget:g}")
                ax2.set_ylim(0, budget * 1.1)
            ax2.set_ylabel("epsilon spent", color="tab:red")
            more = ax2.get_legend_handles_labels()
            handles = (handles[0] + more[0], handles[1] + more[1])
        ax.legend(*handles, fontsize=8, loc="lower right")
        _plotting.title(ax, title or "federated training")
        ax.grid(alpha=0.3)
        atomic_write(path, _plotting.png(fig, dpi=120))
        plt.close(fig)
