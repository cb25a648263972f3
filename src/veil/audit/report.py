"""The privacy report of a training run: certified epsilon next to what an audit measures.

For every record of a run (see :mod:`veil.audit.rundir`) the report gives

* the **certified** (epsilon, delta): the Ledger's spend when the run left one (the only
  figure veil certifies); otherwise the epsilon the run declares, labelled as such;
* **empirical lower bounds** on epsilon, each with its confidence: the one-run audit
  (Steinke et al. 2023) on the audit records' scores, on canaries and on canary clients, and
  the Clopper–Pearson audit on independent trials. Each holds with probability >= the
  confidence; the largest of k of them with probability >= 1 - k (1 - confidence);
* the membership attack's AUC, advantage and TPR at low FPR, and its ROC curve;
* **MI estimates** (nats, with intervals): sample-model MI and party-aggregate MI
  (:mod:`veil.audit.leakage`), next to the ceiling that the certified epsilon implies;
* accuracy and cost, as the run recorded them.

:func:`privacy_report` builds it; :meth:`PrivacyReport.write` saves ``report.json`` and a
self-contained ``report.html`` (PNG plots embedded as base64: privacy-utility curve, audit
tightness, MI across epsilon, ROC curves).
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veil._io import atomic_write
from veil._json import to_jsonable
from veil._validation import check_probability
from veil.audit.attacks import AttackResult
from veil.audit.epsilon import epsilon_lower_bound
from veil.audit.leakage import membership_mi, mi_ceiling
from veil.audit.one_run import one_run_epsilon_lower_bound
from veil.audit.rundir import Run, RunRecord, read_run
from veil.errors import DataError
from veil.random import check_rng

logger = logging.getLogger(__name__)

REPORT_FORMAT = "veil-privacy-report/1"
DEFINITIONS = {
    "certified_epsilon": "the Ledger's certified spend (source 'ledger'); 'declared' values "
                         "come from run.json and are not certified by veil",
    "empirical_epsilon": "a lower bound on the true epsilon at the stated confidence; the "
                         "largest of k bounds holds with probability >= 1 - k(1 - confidence)",
    "audit records (one-run)": "the one-run bound on the member / non-member audit records: "
                               "it assumes each record's membership was decided by an "
                               "independent fair coin before training (a fixed train/test "
                               "split only approximates this)",
    "sample_model_mi": "I(Z; S) in nats, Z ~ Bernoulli(1/2) the presence of one record, S its "
                       "membership score under the trained model (<= I(Z; model))",
    "party_aggregate_mi": "I(Z_p; S_p) in nats, Z_p ~ Bernoulli(1/2) the participation of a "
                          "canary client, S_p = sum_t <aggregate_t, its update> (<= I(Z_p; "
                          "aggregates))",
    "mi_ceiling": "log 2 - (1 - delta) H_b(1/(1 + e^eps)): the largest I(Z; output) an "
                  "(eps, delta)-DP run allows",
}


@dataclass
class PrivacyReport:
    """``data``: the JSON-ready report; ``roc``: label -> (fpr, tpr) for the plots."""

    data: dict[str, Any]
    roc: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self.data), indent=2)

    def to_html(self) -> str:
        return _html(self)

    def write(self, out_dir: str | os.PathLike) -> tuple[Path, Path]:
        """Write ``report.json`` and ``report.html`` into ``out_dir`` (created)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        json_path, html_path = out / "report.json", out / "report.html"
        atomic_write(json_path, self.to_json())
        atomic_write(html_path, self.to_html())
        return json_path, html_path


def _certified(run: Run, record: RunRecord) -> dict[str, Any] | None:
    path = run.ledger_path(record)
    if path is not None:
        from veil.dp import Ledger

        if not path.is_file():
            raise DataError(f"run record {record.label!r}: ledger file {path} does not exist")
        ledger = Ledger.open(path)
        try:
            eps, delta = ledger.spent(record.delta)
            out = {"epsilon": eps, "delta": delta, "source": "ledger",
                   "accountant": ledger.accountant, "charges": len(ledger.history()),
                   "budget": [ledger.epsilon, ledger.delta]}
        finally:
            ledger.close()
        if record.epsilon is not None and record.epsilon < eps * (1 - 1e-9):
            out["declared_epsilon"] = record.epsilon
            logger.warning("run record %r declares epsilon=%g but its ledger certifies %g; "
                           "the report uses the ledger", record.label, record.epsilon, eps)
        return out
    if record.epsilon is not None:
        return {"epsilon": record.epsilon, "delta": record.delta or 0.0, "source": "declared"}
    return None


def _attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run one audit; too little data becomes an entry saying so instead of an exception."""
    try:
        return fn(*args, **kwargs).to_dict()
    except DataError as exc:
        return {"error": str(exc)}


def _audit_record(run: Run, record: RunRecord, confidence: float, rng) -> tuple[dict, Any]:
    cert = _certified(run, record)
    delta = cert["delta"] if cert else (record.delta or 0.0)
    a = record.arrays
    entry: dict[str, Any] = {"label": record.label, "group": record.group, "certified": cert,
                             "accuracy": record.accuracy, "metrics": record.metrics,
                             "cost": record.cost}
    bounds: dict[str, dict] = {}
    mi: dict[str, Any] = {}
    roc = None
    opts = {"delta": delta, "confidence": confidence}
    if "member_scores" in a:
        result = AttackResult.from_scores(a["member_scores"], a["nonmember_scores"], "given")
        entry["attack"] = result.metrics()
        fpr, tpr, _ = result.roc()
        roc = (fpr, tpr)
        scores = np.concatenate([result.member_scores, result.nonmember_scores])
        included = np.arange(scores.size) < result.member_scores.size
        bounds["audit records (one-run)"] = _attempt(one_run_epsilon_lower_bound, scores,
                                                     included, **opts)
        mi["sample_model"] = _attempt(membership_mi, scores, included, confidence=confidence,
                                      rng=rng)
    if "trial_member_scores" in a:
        bounds["independent trials (Clopper-Pearson)"] = _attempt(
            epsilon_lower_bound, a["trial_member_scores"], a["trial_nonmember_scores"],
            rng=rng, **opts)
    if "canary_scores" in a:
        bounds["canaries (one-run)"] = _attempt(one_run_epsilon_lower_bound, a["canary_scores"],
                                                a["canary_included"], **opts)
        if "sample_model" not in mi:
            mi["sample_model"] = _attempt(membership_mi, a["canary_scores"],
                                          a["canary_included"], confidence=confidence, rng=rng)
    if "client_canary_scores" in a:
        bounds["canary clients (one-run)"] = _attempt(
            one_run_epsilon_lower_bound, a["client_canary_scores"], a["client_canary_included"],
            **opts)
        mi["party_aggregate"] = _attempt(membership_mi, a["client_canary_scores"],
                                         a["client_canary_included"], confidence=confidence,
                                         rng=rng)
    if cert:
        mi["ceiling_nats"] = mi_ceiling(cert["epsilon"], delta)
    entry["empirical_epsilon"] = bounds
    entry["mi"] = mi
    valid = {name: b["epsilon"] for name, b in bounds.items() if "epsilon" in b}
    if valid:
        name = max(valid, key=valid.get)
        joint = round(1.0 - len(valid) * (1.0 - confidence), 12)  # union bound over the k
        entry["empirical_epsilon_best"] = {"epsilon": valid[name], "method": name,
                                           "confidence": joint}
        if cert:
            ok = valid[name] <= cert["epsilon"]
            entry["consistent"] = ok
            if not ok:
                logger.warning("run record %r: empirical epsilon %.3g exceeds the certified "
                               "%.3g", record.label, valid[name], cert["epsilon"])
    return entry, roc


def privacy_report(run: Run | str | os.PathLike, *, confidence: float = 0.95,
                   rng=None) -> PrivacyReport:
    """Audit every record of ``run`` (a :class:`~veil.audit.rundir.Run` or a run directory)."""
    confidence = check_probability(confidence, "confidence", low_open=True, high_open=True)
    if not isinstance(run, Run):
        run = read_run(run)
    rng = check_rng(rng)
    entries, rocs = [], {}
    for record in run.records:
        entry, roc = _audit_record(run, record, confidence, rng)
        entries.append(entry)
        if roc is not None:
            rocs[record.label] = roc
    data = {"format": REPORT_FORMAT, "name": run.name, "kind": run.kind,
            "generated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "confidence": confidence, "definitions": DEFINITIONS, "runs": entries}
    return PrivacyReport(data, rocs)


# -- the HTML page ---------------------------------------------------------------------------
def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _eps(entry: dict) -> float | None:
    return entry["certified"]["epsilon"] if entry.get("certified") else None


def _curve(ax, entries: list[dict], value: Callable[[dict], Any], label: str, style: str,
           spread: Callable[[dict], tuple[float, float]] | None = None, tag: str = "") -> None:
    """value(entry) against the certified epsilon (with an error bar from ``spread``): one
    curve per group of records (the records of a run without groups are one curve, labelled
    ``label``; a group's curve is labelled ``tag`` + its name); records without a certified
    epsilon become dashed horizontal lines. Each legend entry gets its own colour."""
    def colour() -> str:
        return f"C{len(ax.get_legend_handles_labels()[0]) % 10}"

    groups: dict[str | None, list[dict]] = {}
    for e in entries:
        if _eps(e) is not None and value(e) is not None:
            groups.setdefault(e.get("group"), []).append(e)
    for group, members in groups.items():
        pts = sorted(members, key=_eps)
        xs, ys = [_eps(e) for e in pts], [value(e) for e in pts]
        name = label if group is None else f"{tag}{group}"
        if spread is None:
            ax.plot(xs, ys, style, color=colour(), label=name)
        else:
            lo_hi = np.array([spread(e) for e in pts], dtype=float)
            err = np.abs(np.vstack([np.array(ys) - lo_hi[:, 0], lo_hi[:, 1] - np.array(ys)]))
            ax.errorbar(xs, ys, yerr=np.nan_to_num(err), fmt=style, capsize=3, color=colour(),
                        label=name)
    for i, e in enumerate(x for x in entries if _eps(x) is None and value(x) is not None):
        ax.axhline(value(e), ls=("--", "-.", ":")[i % 3], lw=1.2, color=colour(),
                   label=f"{tag}{e['label']} (no DP)")


def _log_axis(ax) -> None:
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))


def _plots(report: PrivacyReport) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    entries = report.data["runs"]
    figures: dict[str, str] = {}
    certified = [_eps(e) for e in entries if _eps(e) is not None]

    def axes(title: str, ylabel: str):
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        ax.set_title(title)
        ax.set_xlabel("certified epsilon")
        ax.set_ylabel(ylabel)
        if certified:
            _log_axis(ax)
            ticks: list[float] = []
            for value in sorted(set(certified)):  # one tick per 5% apart: labels stay legible
                if not ticks or value > ticks[-1] * 1.05:
                    ticks.append(value)
            ax.set_xticks(ticks)
            ax.set_xlim(min(certified) / 1.5, max(certified) * 1.5)
        return fig, ax

    if any(e.get("accuracy") is not None for e in entries):
        fig, ax = axes("Privacy-utility curve", "accuracy")
        _curve(ax, entries, lambda e: e.get("accuracy"), "accuracy", "o-")
        _legend(ax)
        figures["Privacy-utility curve"] = _png(fig)
        plt.close(fig)

    best = [e.get("empirical_epsilon_best", {}).get("epsilon") for e in entries]
    if any(b is not None for b in best):
        fig, ax = axes("Audit: empirical lower bound vs certified epsilon", "epsilon")
        _curve(ax, entries, lambda e: e.get("empirical_epsilon_best", {}).get("epsilon"),
               f"empirical lower bound ({report.data['confidence']:g} each)", "s-")
        if certified:
            grid = np.array([min(certified), max(certified)])
            ax.plot(grid, grid, "k:", label="certified (upper bound)")
        _legend(ax)
        figures["Audit tightness"] = _png(fig)
        plt.close(fig)

    def mi_value(kind: str) -> Callable[[dict], Any]:
        return lambda e: e.get("mi", {}).get(kind, {}).get("value_nats")

    def mi_spread(kind: str) -> Callable[[dict], tuple[float, float]]:
        return lambda e: (e["mi"][kind]["lower"], e["mi"][kind]["upper"])

    if any(mi_value(k)(e) is not None for e in entries
           for k in ("sample_model", "party_aggregate")):
        fig, ax = axes("Leakage: mutual information", "nats")
        for kind, style in (("sample_model", "o-"), ("party_aggregate", "^-")):
            name = kind.replace("_", "-") + " MI"
            _curve(ax, entries, mi_value(kind), name, style, mi_spread(kind), f"{name}: ")
        if certified:
            deltas = [e["certified"]["delta"] for e in entries if e.get("certified")]
            grid = np.geomspace(min(certified), max(certified), 50)
            ax.plot(grid, [mi_ceiling(x, max(deltas)) for x in grid], "k:",
                    label="DP ceiling")
        _legend(ax)
        figures["Mutual information across epsilon"] = _png(fig)
        plt.close(fig)

    if report.roc:
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        floor = 1.0
        for label, (fpr, tpr) in report.roc.items():
            shown = fpr > 0  # FPR = 0 has no place on a log axis
            floor = min(floor, fpr[shown].min())
            ax.step(fpr[shown], np.maximum(tpr[shown], 1e-6), where="post", label=label)
        ax.plot([floor, 1], [floor, 1], "k:", lw=1, label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title("Membership inference ROC")
        _legend(ax)
        figures["ROC curves"] = _png(fig)
        plt.close(fig)
    return figures


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return html.escape(str(value))


def _row(e: dict) -> list[str]:
    cert = e.get("certified")
    best = e.get("empirical_epsilon_best")
    attack = e.get("attack", {})
    mi = e.get("mi", {})

    def mi_cell(kind: str) -> str:
        est = mi.get(kind)
        if not est:
            return "–"
        if "error" in est:
            return "n/a"
        return f"{est['value_nats']:.3g} [{est['lower']:.3g}, {est['upper']:.3g}]"

    return [
        html.escape(e["label"]),
        f"{cert['epsilon']:.3g} (δ={cert['delta']:.2g}, {cert['source']})" if cert else "none",
        f"{best['epsilon']:.3g} ({html.escape(best['method'])})" if best else "–",
        _fmt(attack.get("auc")), _fmt(attack.get("tpr_at_fpr_0.001")),
        mi_cell("sample_model"), mi_cell("party_aggregate"), _fmt(mi.get("ceiling_nats")),
        _fmt(e.get("accuracy")), html.escape(", ".join(f"{k}={v}" for k, v in
                                                      (e.get("cost") or {}).items())) or "–",
    ]


def _detail_rows(d: dict) -> str:
    """One row per audit of every record: the bound, what it rests on, and its ceiling."""
    rows = []
    for e in d["runs"]:
        for name, b in e["empirical_epsilon"].items():
            if "error" in b:
                continue
            if "correct" in b:
                basis = (f"{b['correct']}/{b['guesses']} correct guesses (k+={b['k_pos']}, "
                         f"k-={b['k_neg']}) of {b['canaries']}")
            else:
                basis = (f"TPR ≥ {b['tpr_lower']:.3g}, FPR ≤ {b['fpr_upper']:.3g} "
                         f"({b['n_members']} + {b['n_nonmembers']} trials)")
            cells = [html.escape(e["label"]), html.escape(name), f"{b['epsilon']:.3g}",
                     html.escape(basis), f"{b['max_certifiable']:.3g}"]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ["run", "audit", "ε ≥", "evidence",
                                                 "most these trials can show"])
    return f"<h2>Audits</h2><table><tr>{head}</tr>{''.join(rows)}</table>" if rows else ""


_HEAD = ["run", "certified ε", "empirical ε ≥", "AUC", "TPR@0.1%FPR", "sample-model MI",
         "party-aggregate MI", "MI ceiling", "accuracy", "cost"]
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f3f3f3}.warn{color:#b00}.plots img{margin:8px;border:1px solid #ddd}
dt{font-weight:bold}dd{margin:0 0 6px 1.5em}"""


def _html(report: PrivacyReport) -> str:
    d = report.data
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in _row(e)) + "</tr>"
                   for e in d["runs"])
    warnings = "".join(
        f"<p class='warn'>{html.escape(e['label'])}: the empirical lower bound exceeds the "
        "certified epsilon: a (1 - confidence) chance event, or a flaw in the implementation "
        "or the accounting — investigate.</p>" for e in d["runs"] if e.get("consistent") is False)
    notes = "".join(
        f"<li>{html.escape(e['label'])} / {html.escape(name)}: {html.escape(b['error'])}</li>"
        for e in d["runs"] for name, b in {**e["empirical_epsilon"], **{
            k: v for k, v in e["mi"].items() if isinstance(v, dict)}}.items() if "error" in b)
    plots = "".join(f"<figure><img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>"
                    f"<figcaption>{html.escape(t)}</figcaption></figure>"
                    for t, b in _plots(report).items())
    defs = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                   for k, v in d["definitions"].items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Privacy report: {html.escape(d['name'])}</title>
<style>{_STYLE}</style></head><body>
<h1>Privacy report: {html.escape(d['name'])}</h1>
<p>Kind: {html.escape(d['kind'])} · generated {html.escape(d['generated'])} · each empirical
bound holds with confidence {d['confidence']:g}.</p>{warnings}
<table><tr>{''.join(f'<th>{h}</th>' for h in _HEAD)}</tr>{rows}</table>
{_detail_rows(d)}
{f'<h3>Audits that could not run</h3><ul>{notes}</ul>' if notes else ''}
<div class="plots">{plots}</div>
<h2>Definitions</h2><dl>{defs}</dl>
</body></html>
"""
