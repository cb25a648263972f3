"""Small matplotlib helpers shared by every picture veil draws (FL runs, experiments, the
privacy report): a headless backend, a log epsilon axis with plain tick labels, titles that
wrap instead of running off the figure, and a figure as PNG bytes (or base64 text, for
self-contained HTML)."""

from __future__ import annotations

import base64
import io
import textwrap
from collections.abc import Iterable
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def epsilon_axis(ax: Any, values: Iterable[float], axis: str = "x") -> None:
    """A log-scale epsilon axis ticked at ``values`` (thinned to ticks >= 5% apart) and
    labelled as plain numbers ("0.5", "2"), not as "5x10^-1"; no minor labels."""
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

    which = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    ticks: list[float] = []
    for v in sorted({float(v) for v in values if v is not None and v > 0}):
        if not ticks or v > ticks[-1] * 1.05:
            ticks.append(v)
    if ticks:
        which.set_major_locator(FixedLocator(ticks))
        (ax.set_xlim if axis == "x" else ax.set_ylim)(ticks[0] / 1.5, ticks[-1] * 1.5)
    which.set_major_formatter(FormatStrFormatter("%.3g"))
    which.set_minor_formatter(NullFormatter())


def title(fig_or_ax: Any, text: str, *, inches: float | None = None) -> None:
    """A title wrapped to the width of the figure (about 11 characters an inch at 12 pt)."""
    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    width = inches or fig.get_figwidth()
    wrapped = textwrap.fill(text, max(20, int(width * 11)))
    if fig_or_ax is fig:
        fig.suptitle(wrapped)
    else:
        fig_or_ax.set_title(wrapped)


def png(fig: Any, dpi: int = 110) -> bytes:
    """The figure as PNG bytes, cropped to what is drawn (nothing cut off)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def png_base64(fig: Any) -> str:
    """The figure as base64 PNG text, for an ``<img src="data:image/png;base64,...">``."""
    return base64.b64encode(png(fig)).decode("ascii")
