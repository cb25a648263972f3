"""The privacy plan of a query: noise for every part, the selection threshold, and the cost.

Privacy unit and neighbours: two tables are neighbours when one has all the rows of one
privacy unit more. After contribution bounding (:mod:`~veil.dp.query.bounding`) a unit
touches at most ``L0 = max_groups`` groups and moves measurement ``m`` of each by at most
``c_m`` (:meth:`~veil.dp.query.spec.Measurement.unit_bound`).

Noise (floating-point safe, exact samplers of :mod:`veil.dp.samplers`, released on the
power-of-two grid of :func:`veil.dp._numeric.noise_grid` as the Laplace and Gaussian
mechanisms of :mod:`veil.dp` do). The budget is shared equally by the parts (noised
measurements, and one exponential mechanism per quantile), with weights ``w = 1/parts``,
and one scale ``s`` sets them all:

* Laplace: scale ``b_m = c_m s / w``, so each group costs ``LaplaceDpEvent(s / w)`` and a
  unit's ``L0`` groups ``L0`` of them (the worst case: every group shifted by ``c_m``).
  A histogram's bins share a group's bound (``sum |shift| <= c_m``); its group costs the
  pure ``c_m / b_m`` (:func:`~veil.dp.selection.pure_dp_event`), always sound;
* Gaussian: ``sigma_m = c_m s / sqrt(w)``: ``L0`` times ``GaussianDpEvent(s / sqrt(w))``
  (for a histogram the L2 shift of a group is at most ``c_m`` too);
* quantile: the exponential mechanism per group (utility sensitivity ``max_rows``, see
  :func:`veil.dp.stats.quantile_candidates`), pure ``epsilon_q = w g / s`` per group,
  ``g = 1`` with Laplace noise and ``sqrt(2 ln(1/delta))`` with Gaussian noise (a
  Gaussian part's epsilon to first order), ``L0`` times.

Partition selection when group keys are not declared public (Korolova, Kenthapadi,
Mishra & Ntoulas 2009; Wilson et al. 2020; Gopi, Gulhane, Kulkarni, Shen, Shokouhi &
Yekhanin 2020; Desfontaines, Voss, Gipson & Mandayam 2022): a group is released when its
*noisy count* is at least a threshold ``tau``. A group that only the extra unit fills has
a count of at most ``C = max_rows``; with ``p = 1 - (1 - delta_s)^(1/L0)`` and
``tau = C + b ln(1/(2p))`` (Laplace) or ``C + sigma Phi^-1(1 - p)`` (Gaussian), plus half
the release grid, each of the unit's at most ``L0`` new groups appears with probability
at most ``p``, so one of them with probability at most ``delta_s``. Conditioned on none
appearing, the output is a post-processing of the noisy measurements of the groups both
tables share; so the pair of output distributions is dominated by the composition of the
measurements' pairs with the (0, delta_s) pair of a record exposed with probability
``delta_s``, ``PoissonSampledDpEvent(delta_s, NonPrivateDpEvent())``. ``delta_s`` is half
the query's delta. The noisy count used for the threshold is released with the groups.

Noise kind: Laplace when delta is 0; otherwise, unless asked for, whichever of Laplace and
Gaussian has the smaller standard deviation at the first-order scales (Laplace for few
groups and parts per unit, Gaussian for many: its scale grows as sqrt(L0 k), Laplace's as
L0 k).

Tight composition: the whole query is one ``ComposedDpEvent`` of its parts, and ``s`` is
the smallest scale (to 0.1%) at which the ledger's accountant (PLD by default: tight)
certifies ``(epsilon, delta)`` for it (:func:`veil.dp.accounting.calibration.calibrate`).
The plan depends on the declared parameters only, never on the data: it is the dry run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event as de
from scipy.special import ndtri

from veil._validation import check_choice, check_delta, check_epsilon
from veil.dp._numeric import div_down, div_up, noise_grid
from veil.dp.accounting import DEFAULT_ACCOUNTANT, NOT_A_FILTER, describe, make_accountant
from veil.dp.accounting.calibration import calibrate
from veil.dp.gaussian import analytic_gaussian_sigma
from veil.dp.query.spec import Aggregate, Measurement
from veil.dp.selection import Exponential, pure_dp_event
from veil.errors import ConfigError

__all__ = ["Plan", "Part", "make_plan", "NOISES"]

NOISES = ("laplace", "gaussian")
_MARGIN = 1e-9  # relative safety margin on computed thresholds


@dataclass(frozen=True)
class Part:
    """One noised measurement (``noise`` laplace/gaussian, ``scale`` = b or sigma) or one
    quantile (``noise`` exponential, ``epsilon`` per group); ``index`` is the measurement's
    position, ``aggregate`` the quantile's."""

    name: str
    noise: str
    index: int
    unit_bound: float
    scale: float = 0.0
    epsilon: float = 0.0
    aggregate: Aggregate | None = None
    vector: bool = False  # a histogram: several bins per group

    def group_event(self) -> de.DpEvent:
        """The cost of this part in one group (a unit pays it in each of its groups)."""
        if self.noise == "exponential":
            return pure_dp_event(self.epsilon)
        if self.noise == "gaussian":
            return de.GaussianDpEvent(div_down(self.scale, self.unit_bound))
        if self.vector:  # Laplace on bins sharing the bound: pure epsilon c/b per group
            return pure_dp_event(div_up(self.unit_bound, self.scale))
        return de.LaplaceDpEvent(div_down(self.scale, self.unit_bound))

    def mechanism(self) -> Exponential:
        """The exponential mechanism of a quantile part."""
        return Exponential(self.epsilon, self.unit_bound)

    @property
    def grid(self) -> float:
        return noise_grid(self.scale)


@dataclass(frozen=True)
class Plan:
    """What a query will cost and how much noise each part gets (module docstring)."""

    epsilon: float
    delta: float
    certified_epsilon: float
    accountant: str
    noise: str
    max_groups: int
    max_rows: int
    parts: tuple[Part, ...]
    public_keys: bool
    selection_delta: float
    threshold: float | None
    event: de.DpEvent

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (what ``--dry-run`` prints)."""
        parts = []
        for p in self.parts:
            row: dict[str, Any] = {"part": p.name, "noise": p.noise,
                                   "unit_bound_per_group": p.unit_bound}
            if p.noise == "exponential":
                row["epsilon_per_group"] = p.epsilon
            else:
                row["scale"] = p.scale
                row["std"] = p.scale * (math.sqrt(2.0) if p.noise == "laplace" else 1.0)
            parts.append(row)
        return {"epsilon": self.epsilon, "delta": self.delta,
                "certified_epsilon": self.certified_epsilon, "accountant": self.accountant,
                "noise": self.noise, "max_groups": self.max_groups,
                "max_rows": self.max_rows,
                "partition_selection": (None if self.public_keys else
                                        {"threshold": self.threshold,
                                         "delta": self.selection_delta}),
                "parts": parts, "event": describe(self.event)}


def _scaled_parts(s: float, noised: Sequence[tuple[int, Measurement]],
                  quantiles: Sequence[tuple[int, Aggregate]], noise: str, max_rows: int,
                  delta: float) -> list[Part]:
    w = 1.0 / (len(noised) + len(quantiles))
    parts = []
    for index, m in noised:
        c = m.unit_bound(max_rows)
        scale = c * s / (w if noise == "laplace" else math.sqrt(w))
        parts.append(Part(m.name, noise, index, c, scale=scale, vector=m.kind == "histogram"))
    gain = 1.0 if noise == "laplace" else math.sqrt(2.0 * math.log(1.0 / delta))
    for index, a in quantiles:
        parts.append(Part(a.name, "exponential", index, float(max_rows),
                          epsilon=min(w * gain / s, 500.0), aggregate=a))
    return parts


def _event(parts: Sequence[Part], max_groups: int, selection_delta: float) -> de.DpEvent:
    """The query's event: each part in each of a unit's ``max_groups`` groups, and the
    selection. Parts with equal group events are one self-composition, and Gaussian parts
    one Gaussian with ``s = (sum_i L0 / s_i^2)^(-1/2)`` (exactly their composition), so
    an accountant prices the query with few convolutions."""
    counts: dict[de.DpEvent, int] = {}
    inverse_sq = 0.0
    for p in parts:
        event = p.group_event()
        if isinstance(event, de.GaussianDpEvent):
            inverse_sq += max_groups / event.noise_multiplier ** 2
        else:
            counts[event] = counts.get(event, 0) + max_groups
    events: list[de.DpEvent] = [de.SelfComposedDpEvent(e, n) for e, n in counts.items()]
    if inverse_sq:
        events.append(de.GaussianDpEvent(div_down(1.0, math.sqrt(inverse_sq))))
    if selection_delta > 0:
        events.append(de.PoissonSampledDpEvent(selection_delta, de.NonPrivateDpEvent()))
    return de.ComposedDpEvent(events)


def _start(noise: str, parts: int, epsilon: float, delta: float, max_groups: int) -> float:
    """A starting scale for calibration: basic composition of the Laplace parts
    (``L0 parts w / s = epsilon``), or the analytic Gaussian of the composed Gaussian parts
    (``s / sqrt(L0) = sigma(epsilon, delta)``)."""
    if noise == "laplace":
        return max_groups / epsilon
    return math.sqrt(max_groups) * analytic_gaussian_sigma(epsilon, delta)


def _noise_for(parts: int, epsilon: float, delta: float, max_groups: int) -> str:
    """The noise with the smaller standard deviation per unit bound, from the starting
    scales: Laplace ``sqrt(2) L0 k / epsilon``, Gaussian ``sqrt(L0 k) sigma(epsilon,
    delta/2)`` (k noised parts)."""
    laplace = math.sqrt(2.0) * max_groups * parts / epsilon
    gaussian = math.sqrt(max_groups * parts) * analytic_gaussian_sigma(epsilon, delta / 2.0)
    return "laplace" if laplace <= gaussian else "gaussian"


def threshold(count: Part, noise: str, max_groups: int, max_rows: int,
              selection_delta: float) -> float:
    """The noisy-count threshold of partition selection (module docstring)."""
    p = -math.expm1(math.log1p(-selection_delta) / max_groups) * (1.0 - _MARGIN)
    if noise == "laplace":
        tail = count.scale * math.log(1.0 / (2.0 * p)) if p < 0.5 else 0.0
    else:
        tail = max(-count.scale * float(ndtri(p)), 0.0)
    return (max_rows + tail) * (1.0 + _MARGIN) + count.grid / 2.0


def make_plan(measurements: Sequence[Measurement], quantiles: Sequence[Aggregate], *,
              epsilon: float, delta: float, noise: str | None, max_groups: int,
              max_rows: int, public_keys: bool, accountant: str = DEFAULT_ACCOUNTANT) -> Plan:
    """Calibrate the query (module docstring). ``quantiles`` are the quantile aggregates;
    ``measurements`` every measurement (the quantiles' cell counts are not noised)."""
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    n_noised = sum(1 for m in measurements if m.noised)
    if noise is None:
        noise = "laplace" if delta == 0 or not n_noised else \
            _noise_for(n_noised, epsilon, delta, max_groups)
    check_choice(noise, "noise", NOISES)
    if noise == "gaussian" and delta == 0:
        raise ConfigError("delta=0 is not allowed with noise='gaussian': Gaussian noise "
                          "needs delta > 0; use noise='laplace'")
    if not public_keys and delta == 0:
        raise ConfigError("delta=0 is not allowed when the group keys are not declared: DP "
                          "partition selection needs delta > 0; declare the keys (keys=...) "
                          "or give delta")
    if not public_keys and accountant not in ("pld", NOT_A_FILTER):
        raise ConfigError(f"accountant={accountant!r} is not allowed for partition "
                          "selection: its cost is accounted by the 'pld' accountant; use a "
                          "ledger with accountant='pld' or declare the keys")
    noised = [(i, m) for i, m in enumerate(measurements) if m.noised]
    cells = {m: i for i, m in enumerate(measurements) if not m.noised}
    quantile_parts = [(cells[next(m for m in cells if m.column == a.column
                                  and m.bounds == a.bounds and m.resolution == a.resolution)],
                       a) for a in quantiles]
    selection_delta = 0.0 if public_keys else delta / 2.0
    noise_delta = delta - selection_delta

    def event_for(s: float) -> de.DpEvent:
        return _event(_scaled_parts(s, noised, quantile_parts, noise, max_rows,
                                    noise_delta or 1.0), max_groups, selection_delta)

    try:
        s = calibrate(event_for, epsilon, delta, accountant,
                      guess=_start(noise, n_noised, epsilon, noise_delta or delta, max_groups))
    except ConfigError as exc:
        raise ConfigError(f"the query cannot be calibrated to epsilon={epsilon:g}, "
                          f"delta={delta:g} with the {accountant!r} accountant: {exc}") from None
    parts = tuple(_scaled_parts(s, noised, quantile_parts, noise, max_rows,
                                noise_delta or 1.0))
    event = _event(parts, max_groups, selection_delta)
    acc = make_accountant(accountant)
    acc.compose(event)
    certified = acc.get_epsilon(delta)
    tau = None
    if not public_keys:
        count = next(p for p in parts if p.name == "count")
        tau = threshold(count, noise, max_groups, max_rows, selection_delta)
    return Plan(epsilon, delta, certified, accountant, noise, max_groups, max_rows, parts,
                public_keys, selection_delta, tau, event)
