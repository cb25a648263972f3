"""``Federation(clients, model, strategy, rounds).run()``: a whole federated training run.

Each round ``t``:

1. the strategy samples clients (the server does not know which are alive);
2. the round's privacy cost (``strategy.round_event``) is checked against the ledger *before*
   any client trains or any noise is drawn (BudgetExceededError stops the run there). When
   the strategy's round event is fixed by its configuration (``strategy.privacy.fixed_event``,
   e.g. DP-FedAvg), the first private round reserves all the remaining rounds as one
   planned block (:meth:`veil.dp.Ledger.plan`): the run is priced tightly by PLD as one
   schedule, and each round is then charged as a step of the plan (an early stop still
   pays the whole plan). If the budget holds fewer rounds, the plan holds as many as fit
   (:meth:`veil.dp.Ledger.longest_plan`) and the run stops there. A round outside a plan
   (a strategy whose events vary) is charged on its own (a block, at an equal share of the
   ledger's delta over the remaining rounds: valid under adaptive choice, looser);
3. the runtime runs the strategy's protocol for the round, with its faults;
4. if the round completed, the new global parameters replace the old ones (only if they are
   finite and of the right shape: the global model is never corrupted); if it aborted they
   stay as they were, and the charge stands (the protocol may have released something);
5. observers (e.g. an audit's canary clients, :mod:`veil.experiments.canary_audit`) see the global
   parameters; the global model is evaluated on the test data and the metrics are recorded;
6. **releases are logged, not re-made** (write-ahead): the checkpoint (parameters, next
   round, strategy, runtime and observer state, history) is written *together with the
   charge the round owes* (its event and label), in one atomic write; only then is the
   event charged to the ledger. The round's output exists outside the process only from
   that write on, and only with its charge attached.

``run(resume=True)`` continues from the checkpoint. A round recorded there is never re-run
(its released parameters are replayed from the checkpoint); if the process died between the
checkpoint write and the charge, the owed charge is paid first (a charge with the round's
label after the ledger position recorded with it counts as paid, so it is never paid twice).
A round interrupted before its checkpoint released nothing and was charged nothing: it runs
again and is charged once. Hence a resumed run ends with exactly the spend of an
uninterrupted one, and, with an integer ``rng`` (the randomness of round t is derived from
(seed, t)), exactly its model. The ledger (``Ledger(path=...)``) persists itself, so the
budget is never reset.

This holds when the server adds the noise (central DP: a trusted server, whose in-memory
round dies with it). When the clients add it (``strategy.privacy.noise_at_clients``: local,
distributed or hybrid noise, meant to hold against the server), the server receives
noisy values *during* the round and may keep them across a crash; such a round is charged
before it runs, as a release to the server, and a round re-run after a crash mid-round is
a second release and is charged again (never under-counted; the budget then runs out one
round early).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from veil._validation import check_int, check_pair
from veil.errors import ConfigError, DataError
from veil.fl.checkpoint import Checkpoint
from veil.fl.history import History
from veil.fl.runtime import LocalRuntime, RoundReport
from veil.fl.strategies.base import Strategy
from veil.fl.trainer import LocalTrainer
from veil.random import Generator, RngLike, check_rng

if TYPE_CHECKING:
    from veil.dp.ledger import Ledger
    from veil.fl.party_ledger import RoundLedger
    from veil.learn.base import GradientClassifier

__all__ = ["Federation"]

log = logging.getLogger(__name__)

#: appended to the label of every charge of a run with simulated (seeded) DP noise
SIMULATION = " (simulation: seeded noise, epsilon not certified)"


class Federation:
    """A federated training run (see the module docstring).

    Parameters
    ----------
    clients:
        One ``(X, y)`` pair per client; client ids are their positions.
    model:
        A veil.learn model (LogisticRegression, ..., TorchModel): copied, initialized for
        the data's feature count and classes, and trained federatedly.
    strategy:
        FedAvg, FedProx, DPFedAvg(...), SecAgg(...), ...
    rounds:
        Number of rounds.
    test:
        ``(X_test, y_test)`` to evaluate the global model on after every round.
    ledger:
        A :class:`veil.dp.Ledger`; required when the strategy is differentially private.
        A strategy calibrated for a :class:`~veil.dp.PrivacyBudget`
        (``strategy.privacy.budget``) needs the ledger of exactly that budget
        (``Ledger.for_budget(budget, path=...)``): another is refused.
    runtime:
        The runtime (default: a fault-free :class:`~veil.fl.runtime.LocalRuntime`).
    checkpoint:
        A file path: the run's state is saved there after every round.
    rng:
        None (secure randomness), an int seed (reproducible; tests and simulations) or a
        veil.random.Generator. A seed reproduces the sampling, training and faults; keys,
        masks and nonces always come from the CSPRNG, and so does DP noise unless
        ``simulate_noise=True``.
    simulate_noise:
        Draw the DP noise from the seed too (reproducible runs for research and tests): a
        labelled simulation whose epsilon is not certified -- every charge, the history and
        the run's files say so. Needs an int seed.
    classes:
        The label set, declared (public schema knowledge, :mod:`veil.learn.public`);
        ``"from_data"`` or None read every label seen in the clients' and test data, with
        a warning (a client's one relabelled record could add a row to the model).
    on_progress:
        Called with each round's metrics (a dict) after the round is recorded.
    remote:
        The parties live on their own machines (Flower nodes,
        :class:`~veil.fl.runtime.flower.FlowerRuntime`): ``clients`` only size the model
        and the plan, and no party is built here (``self.clients`` maps each index to
        None): the server never holds a party's data, keys or state.

    ``observers`` (a list, empty at first) holds objects that see the global parameters
    after every round, ``observer.observe(round, params)``, and whose ``state_dict()`` and
    ``load_state_dict(state)`` are saved with the checkpoint (e.g.
    :class:`veil.experiments.canary_audit.CanaryClients`).
    """

    def __init__(self, clients: Sequence[tuple[Any, Any]], model: GradientClassifier,
                 strategy: Strategy, rounds: int, *, test: tuple[Any, Any] | None = None,
                 ledger: Ledger | None = None, runtime: LocalRuntime | None = None,
                 checkpoint: str | os.PathLike | None = None, rng: RngLike = None,
                 classes: Sequence[Any] | None = None,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 simulate_noise: bool = False, remote: bool = False) -> None:
        from veil.learn.base import GradientClassifier  # lazy: scikit-learn, scipy
        from veil.learn.public import declared_classes

        if not isinstance(strategy, Strategy):
            raise ConfigError(f"strategy={strategy!r} is not allowed: expected a veil.fl "
                              "strategy (FedAvg, FedProx, DPFedAvg, SecAgg, ...)")
        if not isinstance(model, GradientClassifier):
            raise ConfigError(f"model={type(model).__name__} is not allowed: expected a "
                              "veil.learn model")
        self.privacy = strategy.privacy   # what the run protects; the run branches on it
        if self.privacy.needs_secure_aggregation and not self.privacy.secure_aggregation:
            raise ConfigError("this strategy adds distributed noise, which protects only "
                              "the aggregate: wrap it in SecAgg(...) so that the server never "
                              "sees a single update")
        if ledger is not None:
            from veil.dp.ledger import check_ledger  # lazy: dp_accounting
            from veil.dp.privacy_budget import same_budget

            same_budget(check_ledger(ledger), self.privacy.budget, "the strategy")
        self.rounds = check_int(rounds, "rounds", low=1)
        if not clients:
            raise DataError("clients is empty; expected one (X, y) pair per client")
        data = [check_pair(c, f"clients[{i}]") for i, c in enumerate(clients)]
        widths = {X.shape[1] for X, _ in data}
        if len(widths) != 1:
            raise DataError(f"the clients' X have different feature counts {sorted(widths)}")
        self.test = None if test is None else check_pair(test, "test")
        labels = np.concatenate([y for _, y in data] + ([self.test[1]] if self.test else []))
        # None keeps the old behaviour (read from the data), warned like "from_data"
        classes = declared_classes("from_data" if classes is None else classes, labels,
                                   "Federation")
        self.model = copy.deepcopy(model).initialize(widths.pop(), classes)
        self.initial_params = self.model.get_params_vector()
        self.strategy = strategy
        self.remote = bool(remote)
        self.clients: dict[int, Any] = {i: None if self.remote else
                        strategy.client(i, LocalTrainer(self.model, X, y))
                        for i, (X, y) in enumerate(data)}
        if self.remote:
            strategy.prepare(self.model)
        self.ledger = ledger
        self.runtime = runtime if runtime is not None else LocalRuntime()
        self.checkpoint = None if checkpoint is None else Checkpoint(checkpoint)
        self.on_progress = on_progress
        self.observers: list[Any] = []
        self._seed = rng if isinstance(rng, int) and not isinstance(rng, bool) else None
        if simulate_noise and self._seed is None:
            raise ConfigError("simulate_noise=True is not allowed without an int seed (rng=): "
                              "the simulation draws its DP noise from the seed")
        self.simulate_noise = bool(simulate_noise)
        self._rng = None if self._seed is not None else check_rng(rng)
        self.fingerprint = _fingerprint(data, self.initial_params.size, strategy)
        self.params = self.initial_params.copy()
        self.history = History(simulated_noise=self.simulate_noise)
        self._next_round = 0
        self._rounds: RoundLedger | None = None  # the run's rounds on self.ledger

    # -- the run ----------------------------------------------------------------------------
    def run(self, *, resume: bool = False) -> History:
        """Train for the remaining rounds; returns the history (with the final params)."""
        if resume:
            self._resume()
        if self.remote and not self.runtime.remote:
            raise ConfigError("remote=True is not allowed with this runtime: its parties live "
                              "on their own nodes, which only a runtime that reaches them "
                              "(veil.fl.runtime.flower.FlowerRuntime) can run")
        ids = sorted(self.clients)
        for t in range(self._next_round, self.rounds):
            rng = self._round_rng(t)
            sampled = self.strategy.sample(t, ids, rng)
            event = self.strategy.round_event(t, self.params, sampled, len(ids))
            label = f"fl round {t}" + (SIMULATION if self.simulate_noise else "")
            if event is not None:
                self._check_budget(event, t)
                if self.privacy.noise_at_clients:   # released to the server during the round
                    self._charge(event, label)
            server = self.strategy.server(t, self.params, sampled, rng)
            report = self.runtime.run_round(server, self.clients, rng)
            self._apply(report)
            for observer in self.observers:
                observer.observe(t, self.params)
            record = self._record(t, sampled, report, event)
            self.history.rounds.append(record)
            self._next_round = t + 1
            self.history.params = self.params.copy()
            owed = None
            if event is not None and not self.privacy.noise_at_clients:
                from veil.dp.accounting.serialize import event_to_json  # lazy: dp_accounting

                paid = [c.index for c in self.ledger.history()]
                owed = {"label": label, "event": event_to_json(event),
                        "after": max(paid, default=0)}
            if self.checkpoint is not None:
                self.checkpoint.save(self._state(owed))  # the release and the charge it owes
            if owed is not None:
                self._charge(event, owed["label"])
            if self.on_progress is not None:
                self.on_progress(record)
        self.history.params = self.params.copy()
        return self.history

    def _round_ledger(self) -> RoundLedger:
        """The rounds of this run on ``self.ledger`` (ConfigError without a ledger)."""
        if self.ledger is None:
            raise ConfigError("this strategy is differentially private: pass "
                              "ledger=veil.dp.Ledger(epsilon, delta, ...) to charge "
                              "its rounds to")
        if self._rounds is None or self._rounds.ledger is not self.ledger:
            from veil.fl.party_ledger import RoundLedger  # lazy: dp_accounting

            self._rounds = RoundLedger(self.ledger, self.rounds,
                                       fixed=self.privacy.fixed_event,
                                       suffix=SIMULATION if self.simulate_noise else "")
        return self._rounds

    def _check_budget(self, event: Any, t: int) -> None:
        """BudgetExceededError (or ConfigError without a ledger) before round ``t`` runs;
        opens the plan of the remaining rounds first when the strategy allows one."""
        self._round_ledger().check(t, event)

    def _charge(self, event: Any, label: str) -> None:
        """Charge one round: a step of the plan when it is the plan's next, else alone."""
        self._round_ledger().pay(event, label)

    def _round_rng(self, t: int) -> Generator:
        if self._seed is not None:
            material = self._seed.to_bytes(16, "big", signed=True) + t.to_bytes(8, "big")
            return Generator(b"veil.fl round " + material, simulate_noise=self.simulate_noise)
        return self._rng.spawn(1)[0]

    def _apply(self, report: RoundReport) -> None:
        if report.result is None:
            return
        new = np.asarray(report.result.params, dtype=np.float64)
        if new.shape != self.params.shape or not np.all(np.isfinite(new)):
            report.error = (f"round {report.round}: the aggregate is not a finite vector of "
                            f"{self.params.size} parameters; the global model is kept")
            report.result = None
            log.warning(report.error)
            return
        self.params = new

    def _record(self, t: int, sampled: list[int], report: RoundReport,
                event: Any) -> dict[str, Any]:
        aggregated = len(report.result.clients) if report.result else 0
        cpu = [report.client_cpu[c] for c in sampled if c in report.client_cpu]
        record: dict[str, Any] = {
            "round": t,
            "status": "ok" if report.result else "aborted",
            "sampled": len(sampled),
            "aggregated": aggregated,
            "dropped": len(report.dropped),
            "rejected": len(report.rejected),
            "bytes_up": report.bytes_up,
            "bytes_down": report.bytes_down,
            "time": report.wall_time,
            "server_cpu": report.server_cpu,
            "client_cpu": float(np.mean(cpu)) if cpu else 0.0,
        }
        if report.error:
            record["error"] = report.error
        if report.result:
            record.update({k: float(v) for k, v in report.result.metrics.items()})
        if self.test is not None:
            self.model.set_params_vector(self.params)
            record["accuracy"] = float(self.model.score(*self.test))
            record["loss"] = float(self.model.objective(*self.test))
        if self.ledger is not None:  # the spend once this round's charge is paid
            record["epsilon"], record["delta"] = (float(v) for v in self.ledger.spent())
            rounds = self._round_ledger() if event is not None else None
            if rounds is not None and not self.privacy.noise_at_clients and \
                    not rounds.planned(event):  # charged after, alone
                record["epsilon"] = float(self.ledger.would_spend(event,
                                                                  delta=rounds.round_delta))
        return record

    # -- checkpoints ----------------------------------------------------------------------
    def _state(self, owed: dict[str, Any] | None) -> dict[str, Any]:
        block = self._rounds.block_index if self._rounds is not None else None
        return {"fingerprint": self.fingerprint, "next_round": self._next_round, "owed": owed,
                "block": block,
                "params": self.params, "strategy": self.strategy.state_dict(),
                "runtime": self.runtime.state_dict(), "history": self.history.rounds,
                "observers": [o.state_dict() for o in self.observers]}

    def _resume(self) -> None:
        if self.checkpoint is None:
            raise ConfigError("resume=True needs checkpoint=<path>")
        state = self.checkpoint.load()
        if state is None:
            log.info("no checkpoint at %s yet: starting from round 0", self.checkpoint.path)
            return
        if state.get("fingerprint") != self.fingerprint:
            raise ConfigError(f"the checkpoint {self.checkpoint.path} belongs to a different "
                              "federation (clients, model size or strategy differ); remove it "
                              "to start over")
        params = state["params"]
        if not (isinstance(params, np.ndarray) and params.shape == self.params.shape):
            raise DataError(f"{self.checkpoint.path}: the saved parameters do not fit the model")
        self.params = params.astype(np.float64)
        self._next_round = int(state["next_round"])
        self.strategy.load_state_dict(state["strategy"])
        self.runtime.load_state_dict(state["runtime"])
        saved = state.get("observers", [])
        if len(saved) != len(self.observers):
            raise ConfigError(f"the checkpoint {self.checkpoint.path} holds the state of "
                              f"{len(saved)} observer(s); this federation has "
                              f"{len(self.observers)}")
        for observer, observed in zip(self.observers, saved):
            observer.load_state_dict(observed)
        self.history = History(rounds=list(state["history"]), params=self.params.copy())
        block = state.get("block")
        if block is not None:
            if not isinstance(block, int) or self.ledger is None:
                raise DataError(f"{self.checkpoint.path}: the run's planned block is not "
                                "readable, or no ledger= was given to resume it")
            self._round_ledger().attach(block)
        self._pay(state.get("owed"))
        log.info("resuming after round %d from %s", self._next_round - 1, self.checkpoint.path)

    def _pay(self, owed: Any) -> None:
        """Charge the last recorded round's event unless the ledger already holds it."""
        if owed is None:
            return
        if not (isinstance(owed, dict) and isinstance(owed.get("label"), str)
                and isinstance(owed.get("event"), str) and isinstance(owed.get("after"), int)):
            raise DataError(f"{self.checkpoint.path}: the charge owed by the last round is "
                            "not readable")
        if self.ledger is None:
            raise ConfigError(f"the checkpoint {self.checkpoint.path} holds a differentially "
                              "private round: pass the run's ledger= to resume it")
        if any(c.label == owed["label"] and c.index > owed["after"]
               for c in self.ledger.history()):
            return
        log.info("paying the charge of %s, recorded with its release before the crash",
                 owed["label"])
        from veil.dp.accounting.serialize import event_from_json  # lazy: dp_accounting

        self._charge(event_from_json(owed["event"]), owed["label"])


def _fingerprint(data: list[tuple[np.ndarray, np.ndarray]], n_params: int,
                 strategy: Strategy) -> str:
    h = hashlib.sha256()
    h.update(f"{len(data)}:{n_params}:".encode())
    for X, _ in data:
        h.update(f"{X.shape}".encode())
    chain, s = [], strategy
    while s is not None:
        chain.append(type(s).__name__)
        s = getattr(s, "inner", None)
    h.update("/".join(chain).encode())
    return h.hexdigest()[:32]
