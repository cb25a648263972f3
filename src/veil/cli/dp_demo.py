"""``veil dp demo``: differentially private statistics of UCI Adult (or of the synthetic
census when Adult is not on this machine), all charged to one Ledger."""

from __future__ import annotations

from typing import Any

import numpy as np
import typer

from veil.cli._output import print_json, print_table, say
from veil.datasets import available, load_adult, synthetic_census
from veil.datasets.census import EDUCATION
from veil.datasets.tabular import ADULT_CATEGORIES
from veil.dp import stats
from veil.dp.ledger import Ledger
from veil.random import RngLike

BUDGET = (2.0, 1e-6)


def run_demo(rng: RngLike = None) -> tuple[str, Ledger, list[dict[str, Any]]]:
    """Nine statistics of one table against one Ledger(epsilon=2, delta=1e-6).

    Returns the data set's name, the ledger and one row per statistic (its DP value, the
    exact value for comparison — the data are public — and its cost).
    """
    if available("adult-train"):
        df, name = load_adult("train"), "UCI Adult (adult.data, complete records)"
        education = ADULT_CATEGORIES["education"]
        last = ("income > 50K", "income", stats.histogram,
                {"categories": ["<=50K", ">50K"]}, 0.2, 0.0)
    else:
        df, name = synthetic_census(10_000, rng=rng), "synthetic census (10,000 people)"
        education = EDUCATION
        last = ("median income", "income", stats.quantile,
                {"q": 0.5, "bounds": (0, 500_000)}, 0.2, 0.0)
    queries = [
        ("records", "age", stats.count, {}, 0.1, 0.0),
        ("mean age", "age", stats.mean, {"bounds": (17, 90)}, 0.2, 0.0),
        ("median age", "age", stats.quantile, {"q": 0.5, "bounds": (17, 90)}, 0.2, 0.0),
        ("mean hours/week", "hours-per-week", stats.mean, {"bounds": (1, 99)}, 0.2, 5e-7),
        ("variance hours/week", "hours-per-week", stats.variance, {"bounds": (1, 99)}, 0.3,
         0.0),
        ("90th pct hours/week", "hours-per-week", stats.quantile,
         {"q": 0.9, "bounds": (1, 99)}, 0.2, 0.0),
        ("sex", "sex", stats.histogram, {"categories": ["Female", "Male"]}, 0.2, 0.0),
        ("education", "education", stats.histogram, {"categories": education}, 0.4, 0.0),
        last,
    ]
    ledger = Ledger(*BUDGET)
    rows = []
    for label, column, function, kwargs, eps, delta in queries:
        privacy = {"epsilon": eps} if function is stats.quantile else {"epsilon": eps,
                                                                         "delta": delta}
        result = function(df[column], ledger=ledger, label=label, rng=rng, **kwargs, **privacy)
        rows.append({"statistic": label, "column": column, "value": result.value,
                     "exact": _exact(df[column], result.query, kwargs),
                     "epsilon": result.epsilon, "delta": result.delta,
                     "clipped": result.clipped})
    return name, ledger, rows


def _exact(column: Any, query: str, kwargs: dict[str, Any]) -> Any:
    """The non-private value, for comparison only."""
    if query == "histogram":
        counts = column.value_counts()
        return {c: int(counts.get(c, 0)) for c in kwargs["categories"]}
    if query == "count":
        return len(column)
    x = np.clip(column.to_numpy(dtype=float), *kwargs["bounds"])
    if query == "quantile":
        return float(np.quantile(x, kwargs["q"]))
    return float(x.mean() if query == "mean" else x.var())


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_show(v)}" for k, v in value.items())
    return f"{value:,.4g}" if isinstance(value, float) else f"{value:,}"


def demo(json_: bool = typer.Option(False, "--json", help="Print JSON instead of tables.")):
    """Differentially private statistics of Adult, with the privacy cost of each."""
    name, ledger, rows = run_demo()
    spent = ledger.spent()
    if json_:
        print_json({"data": name, "budget": {"epsilon": ledger.epsilon, "delta": ledger.delta},
                    "spent": spent._asdict(), "statistics": rows})
        return
    print_table([(r["statistic"], _show(r["value"]), _show(r["exact"]), r["epsilon"],
                  r["delta"], r["clipped"]) for r in rows],
                ["statistic", "DP value", "exact (not private)", "epsilon", "delta", "clipped"],
                title=f"Differentially private statistics of {name}")
    say(f"Total charged to one Ledger (PLD accountant): epsilon={spent.epsilon:.4f} (at "
        f"delta={spent.at_delta:g}) of the budget epsilon={ledger.epsilon:g}, "
        f"delta={ledger.delta:g}. Each value is released through the ledger, "
        "which refuses any release that would exceed the budget.")
