"""``make_private``: wrap a model, its optimizer and its data for DP-SGD, with the cost charged.

The privacy cost is settled before training starts. The schedule (sampling rate ``q``,
``steps = epochs * steps_per_epoch``, noise multiplier ``sigma``) is planned, ``sigma`` is
calibrated to a target epsilon by :func:`veil.dp.accounting.calibrate_noise` with the
ledger's own accountant (or the epsilon of a given ``sigma`` is computed by
:func:`~veil.dp.accounting.epsilon_for`), and the event of the **whole schedule** —
``steps`` compositions of the subsampled Gaussian mechanism — is charged to the
:class:`~veil.dp.Ledger` in one charge, up front. Why up front rather than per step:

* the ledger refuses before any example is touched if the schedule does not fit, instead of
  failing half-way through training;
* the ledger can never under-count: the loader refuses to sample a step beyond the charged
  number, and stopping early leaves an over-count (which is safe: the released model is
  post-processing of at most the charged steps);
* one charge of a self-composed event is accounted in one PLD/RDP composition, where
  thousands of per-step charges would re-compose the history each time.

Seeds (``rng=<int>`` or a seeded :class:`~veil.random.Generator`) make a run reproducible:
its sampling *and its noise* come from the seed, so the run is a labelled simulation, as a
federation with ``simulate_noise`` is (:mod:`veil.random`: seeds never reach certified
noise). Its plan says ``simulated=True`` / ``certified=False``, its ledger charge and its
``repr`` say "simulation: seeded noise, epsilon not certified", and a warning is logged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import (
    check_choice,
    check_delta,
    check_int,
    check_positive,
    check_probability,
)
from veil.dp.accounting import (
    DEFAULT_ACCOUNTANT,
    NOT_A_FILTER,
    calibrate_noise,
    epsilon_for,
    subsampled_gaussian_event,
)
from veil.dp.ledger import Ledger, check_ledger
from veil.dp.privacy_budget import PrivacyBudget, check_budget, same_budget
from veil.dp.selection import pure_dp_event
from veil.errors import BudgetExceededError, ConfigError
from veil.learn.dpsgd._torch import nn, torch
from veil.learn.dpsgd.engine import PerExampleGradients
from veil.learn.dpsgd.loader import PrivateLoader, StepCounter, as_source
from veil.learn.dpsgd.optimizer import PrivateOptimizer
from veil.learn.dpsgd.probe import check_independent
from veil.learn.dpsgd.size import EstimatedSize, estimated_size
from veil.learn.public import declared_size
from veil.random import RngLike, check_rng

log = logging.getLogger(__name__)

__all__ = ["make_private", "PrivacyPlan", "PrivateModel"]

_SAMPLING = {"poisson": "poisson", "fixed": "without_replacement"}
#: appended to the label of the charge (and the repr of the plan) of a seeded run
SIMULATION = " (simulation: seeded noise, epsilon not certified)"


@dataclass(frozen=True)
class PrivacyPlan:
    """The DP-SGD schedule and its certified cost (charged to the ledger as one event)."""

    sampling: str           #: "poisson" or "fixed"
    dataset_size: int
    sample_rate: float      #: q
    batch_size: float       #: expected (Poisson, qN) or exact (fixed) logical batch size
    epochs: int
    steps_per_epoch: int
    noise_multiplier: float  #: sigma: the noise standard deviation is sigma * max_grad_norm
    max_grad_norm: float    #: C
    epsilon: float          #: certified epsilon of the whole schedule at ``delta``
    delta: float
    accountant: str
    #: the noise came from a seed (``rng=``): a simulation, its epsilon not certified
    simulated: bool = False

    @property
    def certified(self) -> bool:
        """Whether :attr:`epsilon` is a certified guarantee (False for a seeded simulation)."""
        return not self.simulated

    def __str__(self) -> str:
        return (f"DP-SGD: {self.steps} steps, q={self.sample_rate:.4g}, sigma="
                f"{self.noise_multiplier:.4g}, C={self.max_grad_norm:g}: epsilon="
                f"{self.epsilon:.4g} at delta={self.delta:g} ({self.accountant})"
                + (SIMULATION if self.simulated else ""))

    @property
    def steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def event(self) -> de.DpEvent:
        return _event(self.noise_multiplier, self.sample_rate, self.steps, self.sampling,
                      self.dataset_size)


def _event(sigma: float, q: float, steps: int, sampling: str, n: int) -> de.DpEvent:
    return subsampled_gaussian_event(sigma, q, steps, sampling=_SAMPLING[sampling],
                                     dataset_size=n)


class PrivateModel(nn.Module):
    """The user's model with per-example gradient recording attached.

    ``forward`` is the wrapped module's; ``state_dict``/``load_state_dict`` are the wrapped
    module's (same keys, so checkpoints move freely). :meth:`unwrap` detaches the recording
    and returns the original module.
    """

    def __init__(self, module: nn.Module, engine: PerExampleGradients) -> None:
        super().__init__()
        self.module = module
        self.engine = engine

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        return self.module.load_state_dict(state_dict, *args, **kwargs)

    def unwrap(self) -> nn.Module:
        """Detach DP-SGD from the model and return the original module."""
        self.engine.detach()
        return self.module


def _schedule(n: int, batch_size: Any, sample_rate: Any, sampling: str) -> tuple[float, float]:
    """(q, logical batch size) from exactly one of batch_size / sample_rate."""
    if (batch_size is None) == (sample_rate is None):
        raise ConfigError("give exactly one of batch_size= (expected logical batch size) and "
                          "sample_rate= (probability that an example joins a batch)")
    if batch_size is not None:
        b = check_int(batch_size, "batch_size", low=1)
        if b > n:
            raise ConfigError(f"batch_size={b} is not allowed: larger than the data "
                              f"({n} examples); use at most {n}")
        return b / n, b
    q = check_probability(sample_rate, "sample_rate", low_open=True)
    if sampling == "fixed":
        b = round(q * n)
        if b < 1 or abs(b - q * n) > 1e-9 * n:
            raise ConfigError(f"sample_rate={sample_rate!r} is not allowed with sampling='fixed'"
                              f" and {n} examples: sample_rate * {n} must be a whole batch size "
                              ">= 1; give batch_size= instead")
        return q, b
    return q, q * n


_MAX_SIGMA = 1e6


def _sigma_to_fit(ledger: Ledger, q: float, steps: int, sampling: str, n: int,
                  sigma: float, delta: float) -> float:
    """The smallest noise multiplier (within 1%) whose schedule still fits ``ledger``;
    inf when none up to ``_MAX_SIGMA`` does."""
    lo, hi = sigma, sigma
    while not ledger.fits(_event(hi, q, steps, sampling, n), delta=delta):
        lo, hi = hi, hi * 2
        if hi > _MAX_SIGMA:
            return math.inf
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ledger.fits(_event(mid, q, steps, sampling, n),
                                          delta=delta) else (mid, hi)
    return hi


def _refusal(ledger: Ledger, q: float, steps: int, sampling: str, n: int, sigma: float,
             spent: float, delta: float) -> str:
    """Why a schedule does not fit ``ledger`` and what would make it fit: a larger noise
    multiplier or, when none does, a ledger with more delta (or epsilon) left."""
    schedule = (f"the DP-SGD schedule ({steps} steps, sample_rate={q:.4g}, noise_multiplier="
                f"{sigma:.4g}) costs epsilon={spent:.4g} at delta={delta:g}")
    need = _sigma_to_fit(ledger, q, steps, sampling, n, sigma, delta)
    if math.isinf(need):
        # no noise multiplier up to _MAX_SIGMA fits: the policy prices each run at its own
        # delta and adds the deltas up (veil.dp.accounting.filter), so what is missing is
        # delta (or all of the epsilon), here or in a ledger this one draws from
        return (f"{schedule}, and no noise multiplier fits: this ledger (delta="
                f"{ledger.delta:g}) or a ledger it draws from has less than delta={delta:g} "
                "left, or no epsilon (each run is priced at its own delta and the deltas add "
                "up); open the ledger with the sum of its runs' deltas, or calibrate this run "
                "for a smaller delta; nothing was charged")
    left, at = ledger.remaining()
    return (f"{schedule}, more than the ledger has left (epsilon={left:.4g} at delta={at:g}); "
            f"it would fit with noise_multiplier >= {need:.4g}, or with fewer epochs; "
            "nothing was charged")


def make_private(model: nn.Module, optimizer: torch.optim.Optimizer, data: Any, *,
                 max_grad_norm: float, epochs: int, budget: PrivacyBudget | None = None,
                 noise_multiplier: float | None = None, delta: float | None = None,
                 batch_size: int | None = None, sample_rate: float | None = None,
                 sampling: str = "poisson", max_physical_batch_size: int | None = None,
                 loss_reduction: str = "mean", accountant: str | None = None,
                 ledger: Ledger | None = None, nonfinite: str = "skip",
                 rng: RngLike = None, dataset_size: int | str | None = None,
                 ) -> tuple[PrivateModel, PrivateOptimizer, PrivateLoader]:
    """Prepare ``model``, ``optimizer`` and ``data`` for DP-SGD; charge the whole schedule.

    Parameters
    ----------
    model, optimizer:
        A torch module (batch dimension first) and an optimizer over (some of) its
        parameters; only those parameters are trained, with clipped, noisy gradients.
    data:
        A tensor/array, a tuple of them (e.g. ``(X, y)``), a map-style Dataset or a
        DataLoader (its dataset, collate function and, by default, batch size are used;
        its own sampler is not: batches are drawn by veil's sampler).
    budget, noise_multiplier:
        Exactly one. ``budget``: the :class:`~veil.dp.PrivacyBudget` sigma is calibrated
        for, and the budget of the ledger (a given ``ledger=`` must hold exactly it, e.g.
        ``parent.child(name, epsilon)`` for a slice of a larger ledger; default: a new one
        for it). ``noise_multiplier``: sigma itself; the schedule's epsilon at ``delta`` is
        charged.
    delta:
        With ``noise_multiplier`` only (required): the delta the plan's epsilon is
        certified at.
    max_grad_norm:
        C, the L2 bound on each example's gradient.
    epochs, batch_size | sample_rate:
        The schedule: ``steps = epochs * floor(1/q)`` logical batches with ``q`` the sampling
        rate (``batch_size / N``).
    sampling:
        "poisson" (default) or "fixed" (exactly ``batch_size`` examples per step, accounted
        as sampling without replacement).
    max_physical_batch_size:
        Cut logical batches into chunks of at most this many examples (memory bound).
    loss_reduction:
        "mean" (the loss you back-propagate is the batch mean, as ``nn.CrossEntropyLoss()``)
        or "sum".
    accountant:
        "pld" or "rdp" (default: the ledger's, or "pld"); must match the ledger's.
    ledger:
        The :class:`~veil.dp.Ledger` to charge; None charges a new ledger holding exactly
        this schedule's cost (``optimizer.plan`` reports it).
    nonfinite:
        "skip" (drop examples whose gradient is NaN/inf, counted in ``optimizer.skipped``)
        or "raise".
    rng:
        Randomness for sampling and noise (default: the secure generator). An int (or a
        seeded Generator) seeds both: a reproducible *simulation* whose epsilon is not
        certified (the plan, the charge and the log say so; for tests only).
    dataset_size:
        The public size N that sets ``q = batch_size / N``, the step count and sigma
        (:mod:`veil.learn.public`: under add/remove neighbours the true size is private).
        Poisson sampling then draws each record with probability q whatever the true size.
        ``"public"``: the true size is public (``len(data)``); None (default): the same,
        with a warning. ``sampling="fixed"`` needs the true size, so an int is refused.
        ``EstimatedSize(epsilon_n)``: no public size; ``epsilon_n`` of ``epsilon`` buys a
        private count (charged first, before the model is checked), whose lower confidence
        bound is N (:func:`veil.learn.dpsgd.size.estimated_size`); DP-SGD gets the rest.

    Returns
    -------
    (PrivateModel, PrivateOptimizer, PrivateLoader). Train with::

        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
    """
    # -- validate everything before any state changes ----------------------------------
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model={type(model).__name__} is not allowed: expected a "
                          "torch.nn.Module")
    if not isinstance(optimizer, torch.optim.Optimizer) or isinstance(optimizer,
                                                                       PrivateOptimizer):
        raise ConfigError(f"optimizer={type(optimizer).__name__} is not allowed: expected a "
                          "torch.optim.Optimizer that is not already private")
    check_ledger(ledger, optional=True)
    epsilon = None
    if budget is not None:
        budget = check_budget(budget)
        twice = [name for name, value in (("delta", delta), ("accountant", accountant),
                                          ("noise_multiplier", noise_multiplier))
                 if value is not None]
        if twice:
            raise ConfigError(f"{', '.join(twice)} is not allowed with budget= ({budget}): "
                              "the budget is given once")
        same_budget(ledger, budget, "make_private(budget=...)")
        epsilon, delta, accountant = budget.epsilon, budget.delta, budget.accountant
    elif noise_multiplier is None:
        raise ConfigError("give budget= (a veil.dp.PrivacyBudget: sigma is calibrated to it) "
                          "or noise_multiplier=")
    if delta is None:
        raise ConfigError("delta=None is not allowed: give delta= (the plan's epsilon is "
                          "certified at it) or budget=")
    delta = check_delta(delta)
    if delta == 0:
        raise ConfigError("delta=0 is not allowed: the Gaussian noise of DP-SGD gives "
                          "(epsilon, delta)-DP with delta > 0 only; use e.g. delta < 1/N")
    max_grad_norm = check_positive(max_grad_norm, "max_grad_norm")
    epochs = check_int(epochs, "epochs", low=1)
    check_choice(sampling, "sampling", tuple(_SAMPLING))
    check_choice(loss_reduction, "loss_reduction", ("mean", "sum"))
    check_choice(nonfinite, "nonfinite", ("skip", "raise"))
    if max_physical_batch_size is not None:
        max_physical_batch_size = check_int(max_physical_batch_size, "max_physical_batch_size",
                                            low=1)
    default = ledger.accountant if ledger is not None else DEFAULT_ACCOUNTANT
    accountant = default if accountant is None else accountant
    check_choice(accountant, "accountant", ("pld", "rdp", NOT_A_FILTER))
    if ledger is not None and accountant != ledger.accountant:
        raise ConfigError(f"accountant={accountant!r} is not allowed with this ledger, which "
                          f"accounts with {ledger.accountant!r}")
    generator = check_rng(rng)
    if isinstance(data, torch.utils.data.DataLoader) and batch_size is None \
            and sample_rate is None:
        batch_size = data.batch_size  # the loader's batch size becomes the expected one
    source = as_source(data)
    if source.size < 1:
        raise ConfigError("data holds no example")
    if sampling == "fixed" and dataset_size not in (None, "public"):
        raise ConfigError(f"dataset_size={dataset_size!r} is not allowed with sampling='fixed' "
                          "(exactly batch_size of the true records, accounted with the true "
                          "size): use sampling='poisson' with a declared size, or "
                          "dataset_size='public'")
    if isinstance(dataset_size, EstimatedSize):  # a slice of epsilon buys a private count
        if epsilon is None or not dataset_size.epsilon < epsilon:
            raise ConfigError(f"dataset_size={dataset_size!r} is not allowed with budget="
                              f"{budget}: its slice comes out of the budget's epsilon, so "
                              "give budget= with a larger epsilon")
        if ledger is None:
            ledger = Ledger(epsilon, delta, accountant)
        if not ledger.fits(pure_dp_event(epsilon)):
            raise BudgetExceededError(f"epsilon={epsilon:g} (the size estimate and DP-SGD) "
                                      "does not fit the ledger; nothing was charged")
        n = estimated_size(dataset_size, source.size, ledger, "make_private", generator)
        epsilon -= dataset_size.epsilon
    else:
        n = declared_size(dataset_size, source.size, "make_private", "dataset_size")
    q, batch = _schedule(n, batch_size, sample_rate, sampling)
    steps_per_epoch = max(1, int(1.0 / q))
    steps = epochs * steps_per_epoch
    mode = _SAMPLING[sampling]

    # -- calibrate -----------------------------------------------------------------------
    if epsilon is not None:
        try:
            sigma = calibrate_noise(epsilon, delta, q, steps, accountant, sampling=mode,
                                    dataset_size=n)
        except ConfigError as exc:
            raise ConfigError(f"epsilon={epsilon:g} at delta={delta:g} is not reachable with "
                              f"{steps} steps at sample_rate={q:.4g}: {exc}") from None
    else:
        sigma = check_positive(noise_multiplier, "noise_multiplier")
    spent = epsilon_for(sigma, delta, q, steps, accountant, sampling=mode, dataset_size=n)
    plan = PrivacyPlan(sampling, n, q, batch, epochs, steps_per_epoch, sigma, max_grad_norm,
                       spent, delta, accountant, simulated=generator.seeded)

    # -- attach (validates the layers), then charge ----------------------------------------
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    kinds = {(p.dtype, p.device) for p in params}
    if len(kinds) > 1:
        raise ConfigError(f"the optimizer's parameters have several dtypes/devices "
                          f"{sorted(map(str, kinds))}: DP-SGD needs one (cast the model)")
    engine = PerExampleGradients(model, params, loss_reduction=loss_reduction)
    try:
        check_independent(model, source.take(np.arange(min(2, source.size))))
        if ledger is None:
            ledger = Ledger(epsilon if epsilon is not None else spent, delta, accountant)
        elif not ledger.fits(plan.event, delta=delta):
            raise BudgetExceededError(_refusal(ledger, q, steps, sampling, n, sigma, spent,
                                               delta))
        # the whole run is one planned block, priced at the delta sigma was calibrated for
        # (veil.dp.accounting.filter); an early stop still pays for it
        ledger.charge(plan.event, delta=delta, label=f"dpsgd: {steps} steps, q={q:.4g}, "
                      f"sigma={sigma:.4g}, C={max_grad_norm:g}"
                      + (SIMULATION if plan.simulated else ""))
    except BaseException:
        engine.detach()
        raise
    log.info("%s", plan)
    if plan.simulated:
        log.warning("make_private(rng=%r): the DP-SGD noise comes from the seed; this run is "
                    "a simulation and its epsilon=%.4g is not certified", rng, spent)
    counter = StepCounter(steps)
    # independent streams for the sampling and the noise, so that drawing either for several
    # steps at once leaves a seeded run reproducible
    sampling_rng, noise_rng = generator.spawn(2)
    loader = PrivateLoader(source, plan, counter, sampling_rng, max_physical_batch_size)
    private_optimizer = PrivateOptimizer(optimizer, engine, plan, counter, noise_rng,
                                         ledger=ledger, nonfinite=nonfinite)
    return PrivateModel(model, engine), private_optimizer, loader
