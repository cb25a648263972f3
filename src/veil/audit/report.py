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

import datetime
import html
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

import numpy as np

from veil import _plotting
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

#: why the table's two attack figures can disagree (printed under every audit table)
TWO_FIGURES = ("Why a positive empirical epsilon can sit beside an attack AUC below 0.5: the "
               "lower bound rests on the attack's most confident guesses alone (the audit "
               "records it scores highest and lowest, as many as it chooses to guess), the "
               "AUC on its ranking of all of them. An attack right on a few records and at "
               "chance, or worse, on the rest has both.")


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
    return _plotting.png_base64(fig)


def round_bound(value: float, up: bool) -> str:
    """``value`` to 3 significant digits, rounded up (an upper bound, such as a certified
    epsilon) or down (a lower bound, such as an empirical epsilon): never to the wrong side,
    so a lower bound of 0.99986 reads 0.999, not 1."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    exact = Decimal(repr(float(value)))
    step = Decimal(1).scaleb(exact.adjusted() - 2)
    rounded = float(exact.quantize(step, rounding=ROUND_CEILING if up else ROUND_FLOOR))
    return f"{rounded:.{max(3, exact.adjusted() + 1)}g}"


def _mi(value: float) -> float:
    """Mutual information is >= 0; an estimate below 0 (estimator bias) is shown as 0."""
    return max(float(value), 0.0)


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


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))


def _is_curve(entries: list[dict], value: Callable[[dict], Any]) -> bool:
    """Whether some group of records spans two certified epsilons or more: only then is
    value-against-epsilon a curve; otherwise the records are compared side by side."""
    spans: dict[Any, set[float]] = {}
    for e in entries:
        if _eps(e) is not None and value(e) is not None:
            spans.setdefault(e.get("group"), set()).add(_eps(e))
    return any(len(s) >= 2 for s in spans.values())


def _bars(plt, entries: list[dict], value: Callable[[dict], Any], title: str, xlabel: str,
          extra: Callable[[Any, list[dict]], None] | None = None):
    """One horizontal bar per record (its label and certified epsilon on the axis)."""
    shown = [e for e in entries if value(e) is not None]
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(shown) + 1.4))
    names = [f"{e['label']}  (ε {round_bound(_eps(e), True)})" if _eps(e) is not None else
             f"{e['label']}  (no DP)" for e in shown]
    ys = np.arange(len(shown))[::-1]
    ax.barh(ys, [value(e) for e in shown], color=[
        "C0" if _eps(e) is not None else "0.6" for e in shown], label=xlabel)
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlabel(xlabel)
    if extra is not None:
        extra(ax, shown)
    _plotting.title(ax, title, inches=4.0)
    ax.grid(axis="x", alpha=0.3)
    return fig, ax


def _plots(report: PrivacyReport) -> dict[str, str]:
    plt = _plotting.pyplot()
    entries = report.data["runs"]
    figures: dict[str, str] = {}
    certified = [_eps(e) for e in entries if _eps(e) is not None]

    def axes(title: str, ylabel: str):
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        _plotting.title(ax, title, inches=4.5)
        ax.set_xlabel("certified epsilon")
        ax.set_ylabel(ylabel)
        _plotting.epsilon_axis(ax, certified)
        return fig, ax

    def span(ax) -> np.ndarray:  # the whole epsilon axis: a line seen even for one epsilon
        return np.geomspace(*ax.get_xlim(), 50)

    def accuracy(e: dict) -> Any:
        return e.get("accuracy")

    if any(accuracy(e) is not None for e in entries):
        if _is_curve(entries, accuracy):
            title = "Privacy-utility curve"
            fig, ax = axes(title, "accuracy")
            _curve(ax, entries, accuracy, "accuracy", "o-")
            _legend(ax)
        else:
            title = "Accuracy of each model"
            fig, ax = _bars(plt, entries, accuracy, title, "test accuracy")
        figures[title] = _png(fig)
        plt.close(fig)

    def best(e: dict) -> Any:
        return e.get("empirical_epsilon_best", {}).get("epsilon")

    if certified and any(best(e) is not None and _eps(e) is not None for e in entries):
        dp = [e for e in entries if _eps(e) is not None]
        if _is_curve(dp, best):
            title = "Audit: empirical lower bound vs certified epsilon"
            fig, ax = axes(title, "epsilon")
            _curve(ax, dp, best, f"empirical lower bound ({report.data['confidence']:g} each)",
                   "s-")
            ax.plot(span(ax), span(ax), "k:", label="certified (upper bound)")
            _legend(ax)
        else:
            def certified_marks(ax, shown):
                ys = np.arange(len(shown))[::-1]
                ax.plot([_eps(e) for e in shown], ys, "k|", markersize=14,
                        label="certified epsilon (upper bound)")
                ax.legend(fontsize=8, loc="lower right")
            title = "Audit: empirical lower bound (bar) vs certified epsilon (mark)"
            fig, ax = _bars(plt, dp, lambda e: best(e) or 0.0, title,
                            f"epsilon (lower bound at confidence "
                            f"{report.data['confidence']:g})", certified_marks)
        figures[title] = _png(fig)
        plt.close(fig)

    def mi_value(kind: str) -> Callable[[dict], Any]:
        def value(e: dict) -> Any:
            v = e.get("mi", {}).get(kind, {}).get("value_nats")
            return None if v is None else _mi(v)
        return value

    def mi_spread(kind: str) -> Callable[[dict], tuple[float, float]]:
        return lambda e: (_mi(e["mi"][kind]["lower"]), _mi(e["mi"][kind]["upper"]))

    kinds = [k for k in ("sample_model", "party_aggregate")
             if any(mi_value(k)(e) is not None for e in entries)]
    if kinds and certified and any(_is_curve(entries, mi_value(k)) for k in kinds):
        title = "Leakage: mutual information across epsilon"
        fig, ax = axes(title, "nats")
        for kind, style in (("sample_model", "o-"), ("party_aggregate", "^-")):
            name = kind.replace("_", "-") + " MI"
            _curve(ax, entries, mi_value(kind), name, style, mi_spread(kind), f"{name}: ")
        deltas = [e["certified"]["delta"] for e in entries if e.get("certified")]
        ax.plot(span(ax), [mi_ceiling(x, max(deltas)) for x in span(ax)], "k:",
                label="DP ceiling")
        _legend(ax)
        figures[title] = _png(fig)
        plt.close(fig)
    elif kinds:
        kind = kinds[0]
        title = f"Leakage: {kind.replace('_', '-')} mutual information"
        fig, ax = _bars(plt, entries, mi_value(kind), title,
                        "nats (estimates below 0 shown as 0)")
        figures[title] = _png(fig)
        plt.close(fig)

    if report.roc:
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        floor = 1.0
        for label, (fpr, tpr) in report.roc.items():
            # a log axis has no place for 0: the curve starts at its first positive point
            # (clamping TPR 0 to a floor would draw a cliff the attack does not have)
            shown = (fpr > 0) & (tpr > 0)
            if not shown.any():
                continue
            floor = min(floor, fpr[shown].min(), tpr[shown].min())
            ax.step(fpr[shown], tpr[shown], where="post", label=label)
        ax.plot([floor, 1], [floor, 1], "k:", lw=1, label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title("Membership inference ROC")
        _legend(ax)
        figures["Membership inference ROC"] = _png(fig)
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
        return (f"{_mi(est['value_nats']):.3g} [{_mi(est['lower']):.3g}, "
                f"{_mi(est['upper']):.3g}]")

    return [
        html.escape(e["label"]),
        f"{round_bound(cert['epsilon'], True)} (δ={cert['delta']:.2g}, {cert['source']})"
        if cert else "none",
        f"{round_bound(best['epsilon'], False)} ({html.escape(best['method'])})" if best else "–",
        _fmt(attack.get("auc")), _fmt(attack.get("tpr_at_fpr_0.001")),
        mi_cell("sample_model"), mi_cell("party_aggregate"), _fmt(mi.get("ceiling_nats")),
        _fmt(e.get("accuracy")), html.escape(_cost(e.get("cost") or {})) or "–",
    ]


def _cost(cost: dict[str, Any]) -> str:
    """Seconds, bytes and counts for people: '12.3 s, 4.56 MB, 30 rounds'."""
    parts = []
    for key, value in cost.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            parts.append(f"{key} {value}")
        elif key in ("seconds", "time"):
            parts.append(f"{value:.3g} s")
        elif "bytes" in key:
            unit = next(((f, u) for f, u in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"))
                         if value >= f), (1, "B"))
            parts.append(f"{value / unit[0]:.3g} {unit[1]}")
        else:
            parts.append(f"{value:g} {key}")
    return ", ".join(parts)


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
            cells = [html.escape(e["label"]), html.escape(name), round_bound(b["epsilon"], False),
                     html.escape(basis), f"{b['max_certifiable']:.3g}"]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ["run", "audit", "ε ≥", "evidence",
                                                 "most these trials can show"])
    return f"<h2>Audits</h2><table><tr>{head}</tr>{''.join(rows)}</table>" if rows else ""


def verdict(entry: dict) -> str:
    """One record's result in a line of plain text: its certified epsilon and the strongest
    attack on it."""
    cert, best = entry.get("certified"), entry.get("empirical_epsilon_best")
    auc = entry.get("attack", {}).get("auc")
    line = (f"{entry['label']}: certified epsilon {round_bound(cert['epsilon'], True)} "
            f"(delta {cert['delta']:.2g}{'' if cert['source'] == 'ledger' else ', declared'})"
            if cert else f"{entry['label']}: no DP guarantee")
    line += (f"; strongest attack: epsilon >= {round_bound(best['epsilon'], False)}" if best else
             "; no attack could run")
    line += "" if auc is None else f", AUC {auc:.3f}"
    if entry.get("consistent") is False:
        line += " (above the certified bound: investigate)"
    return line


def headline(d: dict) -> str:
    """The whole report in a few plain sentences: the certified epsilon, the strongest
    attack found, and what the two mean."""
    runs = d["runs"]
    dp = [e for e in runs if e.get("certified")]
    attacked = [e for e in runs if e.get("empirical_epsilon_best")]
    parts = []
    if dp:
        top = max(dp, key=lambda e: e["certified"]["epsilon"])
        eps, delta = top["certified"]["epsilon"], max(e["certified"]["delta"] for e in dp)
        parts.append(f"Certified epsilon: at most {round_bound(eps, True)} (delta {delta:.2g}) for "
                     f"{'every' if len(dp) > 1 else 'the'} DP model.")
    if attacked:
        strongest = max(attacked, key=lambda e: e["empirical_epsilon_best"]["epsilon"])
        best = strongest["empirical_epsilon_best"]
        parts.append(f"The strongest attack found epsilon >= {round_bound(best['epsilon'], False)} "
                     f"(on {strongest['label']}, confidence {best['confidence']:g}).")
    if dp:
        parts.append("What that means: whoever sees a DP model can raise their odds that any "
                     "one person was in its training data by a factor of at most "
                     + (f"{math.exp(eps):.3g}" if eps < 700 else f"e^{eps:.3g}")  # no overflow
                     + (f", except with probability {delta:.2g}" if delta
                                                else "") + ", whatever else they know.")
        found = [e["empirical_epsilon_best"]["epsilon"] for e in dp
                 if e.get("empirical_epsilon_best")]
        if any(e.get("consistent") is False for e in dp):
            parts.append("An attack exceeded a certified bound: a (1 - confidence) chance "
                         "event, or a flaw in the implementation or the accounting; "
                         "investigate before publishing.")
        elif found and max(found) >= 0.5 * eps:
            parts.append("The attacks come close to that bound: the guarantee is tight.")
        elif found:
            parts.append("The attacks found far less than the bound allows: they learned "
                         "little, which does not make the models more private than certified.")
    plain = [e["label"] for e in runs if not e.get("certified")]
    if plain:
        parts.append(f"Without DP ({', '.join(plain)}), nothing bounds what a stronger attack "
                     "could learn about one person.")
    return " ".join(parts)


def _verdict(d: dict) -> str:
    items = "".join(f"<li>{html.escape(verdict(e))}</li>" for e in d["runs"])
    return (f"<section class='verdict'><h2>Verdict</h2><p>{html.escape(headline(d))}</p>"
            f"<ul>{items}</ul></section>")


_HEAD = ["run", "certified ε", "empirical ε ≥", "AUC", "TPR@0.1%FPR", "sample-model MI",
         "party-aggregate MI", "MI ceiling", "accuracy", "cost"]
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f3f3f3}.warn{color:#b00}.plots img{margin:8px;border:1px solid #ddd}
dt{font-weight:bold}dd{margin:0 0 6px 1.5em}
.verdict{background:#f6f8fa;border-left:4px solid #2a6;padding:2px 16px;margin-bottom:1em}
.verdict li{margin:6px 0}"""


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
{_verdict(d)}{warnings}
<p>Kind: {html.escape(d['kind'])} · generated {html.escape(d['generated'])} · each empirical
bound holds with confidence {d['confidence']:g}.</p>
<table><tr>{''.join(f'<th>{h}</th>' for h in _HEAD)}</tr>{rows}</table>
<p class="note">{html.escape(TWO_FIGURES)}</p>
{_detail_rows(d)}
{f'<h3>Audits that could not run</h3><ul>{notes}</ul>' if notes else ''}
<div class="plots">{plots}</div>
<h2>Definitions</h2><dl>{defs}</dl>
</body></html>
"""
