"""The fit report: what a synthetic table kept of the real one, for the data steward.

**Not private.** The report shows the *real* table's marginals beside the synthetic ones:
it is for whoever already holds the real data (to judge a release before publishing it),
never part of the release. Only the synthetic table is covered by the certificate.

:func:`fit_report` writes one self-contained HTML page (no external assets: the charts are
PNGs inlined as base64, :func:`veil._plotting.png_base64`) with

* the certificate: method, (epsilon, delta) and the zCDP rho they were fitted under, the
  neighbour relation (add/remove one row, :mod:`veil.synth.base`), the ledger row charged,
  and whether the noise was seeded (a labelled simulation, not certified);
* the workload error (:func:`veil.synth.evaluate`: mean L1 between normalised marginals,
  over the synthesizer's workload, or every 3-way marginal);
* per column, the real and synthetic one-way marginals (shares of rows) side by side;
* the ``pairs`` two-way marginals with the largest L1 error
  ``|| M_ab(real) / n - M_ab(synthetic) / m ||_1``, real and synthetic as heat maps.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd

from veil import _plotting
from veil._validation import check_int
from veil.errors import ConfigError
from veil.synth.base import Synthesizer
from veil.synth.evaluation import evaluate
from veil.synth.model import marginal_counts
from veil.synth.schema import Column

__all__ = ["fit_report", "NOT_PRIVATE"]

#: the warning the report and the CLI's --report help carry
NOT_PRIVATE = ("This report shows the real table's marginals, which are NOT differentially "
               "private: it is for the data steward who holds the real data. Publish only the "
               "synthetic table, never this report.")

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f3f3f3;text-align:left}figure{display:inline-block;margin:8px}
img{border:1px solid #ddd}.warn{background:#fff4f4;border-left:4px solid #b00;padding:8px 16px}"""


def _labels(column: Column) -> list[str]:
    """The declared values of ``column``: its categories, or its bins ``[lo, hi)`` (the last
    one closed)."""
    if column.kind == "categorical":
        return [str(c) for c in column.categories]
    e = column.edges
    return [f"[{e[i]:g}, {e[i + 1]:g}{']' if i == len(e) - 2 else ')'}"
            for i in range(len(e) - 1)]


def _shares(codes: np.ndarray, sizes: Sequence[int], attrs: tuple[int, ...]) -> np.ndarray:
    return marginal_counts(codes, sizes, attrs) / max(len(codes), 1)


def _one_way(plt, name: str, labels: list[str], real: np.ndarray, synthetic: np.ndarray) -> str:
    """Grouped bars: the real and synthetic share of each value of one column."""
    k = len(labels)
    fig, ax = plt.subplots(figsize=(min(12.0, 2.4 + 0.32 * k), 3.2))
    x = np.arange(k)
    ax.bar(x - 0.2, real, width=0.4, label="real (not private)", color="0.55")
    ax.bar(x + 0.2, synthetic, width=0.4, label="synthetic", color="C0")
    ax.set_xticks(x, labels, rotation=60 if k > 4 else 0, ha="right" if k > 4 else "center",
                  fontsize=7)
    ax.set_ylabel("share of rows")
    ax.legend(fontsize=8)
    l1 = float(np.abs(real - synthetic).sum())
    _plotting.title(ax, f"{name}: one-way marginal (L1 error {l1:.3f})")
    out = _plotting.png_base64(fig)
    plt.close(fig)
    return out


def _two_way(plt, names: tuple[str, str], labels: tuple[list[str], list[str]],
             real: np.ndarray, synthetic: np.ndarray, l1: float) -> str:
    """Heat maps of the real and synthetic two-way marginal on one colour scale (the column
    with more values down the side)."""
    if real.shape[1] > real.shape[0]:
        names, labels = names[::-1], labels[::-1]
        real, synthetic = real.T, synthetic.T
    rows, cols = real.shape
    fig, axes = plt.subplots(1, 2, sharey=True, layout="constrained",
                             figsize=(min(14.0, 3.6 + 0.5 * cols), 1.8 + 0.2 * rows))
    top = max(float(real.max()), float(synthetic.max()), 1e-12)
    for ax, table, what in zip(axes, (real, synthetic), ("real (not private)", "synthetic")):
        image = ax.imshow(table, vmin=0.0, vmax=top, cmap="viridis", aspect="auto")
        ax.set_xticks(np.arange(cols), labels[1], rotation=60, ha="right", fontsize=6)
        ax.set_xlabel(names[1])
        ax.set_title(what, fontsize=9)
    axes[0].set_yticks(np.arange(rows), labels[0], fontsize=6)
    axes[0].set_ylabel(names[0])
    fig.colorbar(image, ax=list(axes), label="share of rows")
    _plotting.title(fig, f"{names[0]} x {names[1]}: two-way marginal (L1 error {l1:.3f})")
    out = _plotting.png_base64(fig)
    plt.close(fig)
    return out


def _figure(caption: str, b64: str, kind: str) -> str:
    text = html.escape(caption)
    return (f"<figure class='{kind}'><img alt='{text}' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{text}</figcaption></figure>")


def fit_report(synth: Synthesizer, real: pd.DataFrame, synthetic: pd.DataFrame, *,
               pairs: int = 4) -> str:
    """The report's HTML for a fitted ``synth``, the ``real`` table it was fitted on and a
    ``synthetic`` sample of it (module docstring); ``pairs``: two-way marginals shown."""
    if not hasattr(synth, "model_"):
        raise ConfigError(f"{type(synth).__name__} is not fitted: the report describes a fit")
    check_int(pairs, "pairs", low=0)
    schema = synth.schema
    workload = getattr(synth, "workload", None)   # AIM's (a name alone: one column)
    if workload is not None:
        workload = [[w] if isinstance(w, str) else list(w) for w in workload]
    result = evaluate(real, synthetic, schema=schema, workload=workload)
    real_codes, syn_codes = schema.encode(real), schema.encode(synthetic)
    names, sizes = schema.names, schema.sizes
    labels = [_labels(c) for c in schema.columns]
    plt = _plotting.pyplot()
    one_way = "".join(_figure(f"{n}: one-way marginal", _one_way(
        plt, n, labels[a], _shares(real_codes, sizes, (a,)), _shares(syn_codes, sizes, (a,))),
        "one-way") for a, n in enumerate(names))
    errors = []
    for ab in itertools.combinations(range(len(names)), 2):
        r, s = _shares(real_codes, sizes, ab), _shares(syn_codes, sizes, ab)
        errors.append((float(np.abs(r - s).sum()), ab, r, s))
    errors.sort(key=lambda e: -e[0])
    two_way = "".join(_figure(f"{names[a]} x {names[b]}: two-way marginal", _two_way(
        plt, (names[a], names[b]), (labels[a], labels[b]), r, s, l1), "two-way")
        for l1, (a, b), r, s in errors[:pairs])
    charge = synth.charge_
    certificate = {
        "method": synth.method, "epsilon": f"{synth.epsilon:g}", "delta": f"{synth.delta:g}",
        "rho (zCDP)": f"{synth.cost().rho:.4g}",
        "neighbouring tables": "differ by adding or removing one row",
        "ledger charge": f"#{charge.index} {charge.label or ''} (scope {charge.scope}): the "
                         f"ledger's spend after it is epsilon {charge.epsilon:.4g}",
        "noise": ("SEEDED: a labelled simulation, this epsilon is not certified"
                  if synth.simulated_ else "veil.random's CSPRNG (certified)"),
        "marginals measured": str(len(synth.measurements_)),
        "model cells": str(synth.model_.tree.cells()),
        "rows": f"{len(real)} real, {len(synthetic)} synthetic",
    }
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in certificate.items())
    title = f"DP synthetic data: {html.escape(synth.method)} fit report"
    shown = min(pairs, len(errors))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{_STYLE}</style></head><body>
<h1>{title}</h1>
<p class="warn"><strong>Not private.</strong> {html.escape(NOT_PRIVATE)}</p>
<h2>Certificate</h2><table>{rows}</table>
<h2>Workload error</h2>
<p>Mean L1 distance between the real and synthetic normalised marginals over
{result.workload_size} workload marginals: <strong>{result.workload_error:.4f}</strong>
(0 is perfect, 2 the worst).</p>
<h2>One-way marginals</h2>{one_way}
<h2>Two-way marginals with the largest error</h2>
<p>The {shown} of {len(errors)} column pairs whose L1 error is largest.</p>{two_way}
</body></html>
"""

