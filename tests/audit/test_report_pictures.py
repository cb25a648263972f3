"""Regression tests for issue 19, item 7: the pictures and the privacy report."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from veil import _plotting
from veil.audit import Run, RunRecord, privacy_report
from veil.audit.report import _cost, round_bound, verdict
from veil.experiments.truex import plot as truex_plot
from veil.fl.history import History


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures drawn while the fixture is active (instead of PNG files)."""
    drawn = []
    real = _plotting.png

    def keep(fig, dpi=110):
        drawn.append(fig)
        return real(fig, dpi=dpi)

    monkeypatch.setattr(_plotting, "png", keep)
    plt = _plotting.pyplot()
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    yield drawn
    for fig in drawn:
        plt.figure(fig.number)
        plt.close("all")


def _scores(rng, n, shift):
    return rng.normal(shift, 1.0, n), rng.normal(0.0, 1.0, n)


def demo_like_run() -> Run:
    """Records as the demo writes them: each method once at the same epsilon, some without
    DP, the attacks weak (TPR 0 at the lowest FPRs)."""
    rng = np.random.default_rng(0)
    records = []
    for label, eps in (("no privacy", None), ("central DP", 1.0), ("local DP", 1.0)):
        members, nonmembers = _scores(rng, 200, 0.05)
        records.append(RunRecord(label, epsilon=eps, delta=1e-5 if eps else None,
                                 accuracy=0.8, cost={"seconds": 12.345678, "bytes": 4567890,
                                                     "rounds": 30},
                                 arrays={"member_scores": members,
                                         "nonmember_scores": nonmembers}))
    return Run("demo-like", "hybrid", records)


def test_lower_bounds_round_down_and_upper_bounds_up():
    assert round_bound(0.99986, up=False) == "0.999"   # the HTML report used to show "1"
    assert round_bound(0.99986, up=True) == "1"
    assert round_bound(0.999, up=False) == "0.999" and round_bound(2.0, up=True) == "2"
    assert round_bound(1234.5, up=False) == "1230"


def test_report_opens_with_a_plain_verdict_and_formats_costs(figures):
    report = privacy_report(demo_like_run(), rng=1)
    page = report.to_html()
    first = page.index("<table")
    verdict_html = page[:first]
    assert "Verdict" in verdict_html
    assert "Certified epsilon: at most 1 (delta 1e-05) for every DP model." in verdict_html
    assert "The strongest attack found epsilon &gt;= " in verdict_html
    assert "factor of at most 2.72" in verdict_html  # what the number means
    assert "Without DP (no privacy)" in verdict_html
    lines = [verdict(e) for e in report.data["runs"]]
    assert lines[0].startswith("no privacy: no DP guarantee; strongest attack: epsilon >= ")
    assert lines[1].startswith("central DP: certified epsilon 1 (delta 1e-05, declared)")
    assert _cost({"seconds": 12.345678, "bytes": 4567890, "rounds": 30}) == \
        "12.3 s, 4.57 MB, 30 rounds"
    assert "12.3 s, 4.57 MB, 30 rounds" in page and "12.345678" not in page


def test_one_point_per_method_is_not_drawn_as_a_curve(figures):
    privacy_report(demo_like_run(), rng=1).to_html()
    titles = [ax.get_title() for fig in figures for ax in fig.axes]
    utility = next(fig for fig in figures if "Accuracy of each model" in fig.axes[0].get_title())
    ax = utility.axes[0]
    assert len(ax.patches) == 3 and ax.get_xscale() == "linear"  # one bar per record
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "no privacy  (no DP)", "central DP  (ε 1)", "local DP  (ε 1)"]
    # every legend entry is something drawn with extent (no zero-length "certified" line)
    for fig in figures:
        for a in fig.axes:
            for line in a.get_lines():
                if not line.get_label().startswith("_"):
                    xy = np.asarray(line.get_xydata(), dtype=float)
                    assert len(xy) >= 2 or line.get_marker() not in ("None", None, ""), \
                        (a.get_title(), line.get_label())
                    if len(xy) >= 2 and line.get_linestyle() != "None":
                        assert np.ptp(xy[:, 0]) > 0 or np.ptp(xy[:, 1]) > 0
    assert any("ROC" in t for t in titles)


def test_roc_does_not_clamp_a_zero_tpr(figures):
    privacy_report(demo_like_run(), rng=1).to_html()
    roc = next(ax for fig in figures for ax in fig.axes if "ROC" in ax.get_title())
    for line in roc.get_lines():
        if line.get_label() != "chance":
            assert np.min(line.get_ydata()) > 1e-6  # no false cliff down to 1e-6


def test_negative_mutual_information_is_shown_as_zero():
    report = privacy_report(demo_like_run(), rng=1)
    entry = report.data["runs"][0]
    entry["mi"]["sample_model"] = {"value_nats": -0.012, "lower": -0.03, "upper": 0.01}
    page = report.to_html()
    assert "-0.012" not in page and "0 [0, 0.01]" in page


def test_fl_plot_numbers_rounds_like_the_tables_and_shows_the_budget(tmp_path, figures):
    history = History([{"round": t, "status": "ok", "accuracy": 0.5 + 0.1 * t,
                        "epsilon": 0.4 * (t + 1)} for t in range(5)])
    history.plot(tmp_path / "plot.png", title="a title", budget=2.0)
    assert (tmp_path / "plot.png").stat().st_size > 1000
    fig = figures[-1]
    acc_line = fig.axes[0].get_lines()[0]
    assert list(acc_line.get_xdata()) == [0, 1, 2, 3, 4]
    labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    assert "budget epsilon = 2" in labels


def test_truex_figure_keeps_its_title_and_plain_log_ticks(tmp_path, figures):
    summary = [{"parties": 10, "method": m, "honest": t, "epsilon": e,
                "accuracy_mean": 0.7, "accuracy_std": 0.01}
               for m, t in (("central", None), ("hybrid", 5)) for e in (0.1, 0.6, 2.0)]
    summary.append({"parties": 10, "method": "none", "honest": None, "epsilon": 0,
                    "accuracy_mean": 0.9, "accuracy_std": 0.0})
    long_title = "Truex et al. comparison: nursery, tree (laplace noise, noise-only simulation)"
    truex_plot(summary, tmp_path / "t.png", title=long_title)
    fig = figures[-1]
    fig.canvas.draw()
    suptitle = fig._suptitle.get_text()
    assert " ".join(suptitle.split()) == long_title and "\n" in suptitle
    box = fig._suptitle.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # not cut off
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["0.1", "0.6", "2"]


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium on this machine "
                    "(apt-get install chromium to run this check)")
def test_report_renders_in_a_real_browser(tmp_path):
    report = privacy_report(demo_like_run(), rng=1)
    _, html_path = report.write(tmp_path)
    shot = tmp_path / "shot.png"
    subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=1200,900",
                    html_path.resolve().as_uri()], check=True, timeout=120,
                   capture_output=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    # the first screen is not blank: many distinct colours (text, plots)
    from matplotlib.image import imread

    pixels = imread(shot)
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1])[::97], axis=0)) > 20
    assert re.search("Verdict", html_path.read_text())
