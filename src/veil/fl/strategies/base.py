"""The strategy interface, wrappers, and the plain (unprotected) transport of updates.

A :class:`Strategy` (an ABC) decides (as in Flower) which clients take part in a round
(:meth:`~Strategy.sample`) and what a round costs in privacy (:meth:`~Strategy.round_event`),
and builds the protocol objects of a round: :meth:`~Strategy.server` and
:meth:`~Strategy.client` (the hybrid approach, :class:`~veil.fl.strategies.Hybrid`, is one).
An :class:`UpdateStrategy` (the FedAvg family) also says what the clients are told
(:meth:`~UpdateStrategy.client_config`), what each computes
(:meth:`~UpdateStrategy.client_update`, run on the client) and how the server turns the sums
of the updates into the next global model (:meth:`~UpdateStrategy.aggregate`); its default
transport is the plain one below, where each client sends its update in the clear; secure
aggregation (:class:`~veil.fl.strategies.SecAgg`) replaces it. Rounds are numbered
``server_round``, as in Flower.

A :class:`StrategyWrapper` delegates everything to an inner strategy and overrides what it
changes (DP-FedAvg clips and adds noise around any aggregation rule, secure aggregation
changes the transport), so protections compose with every strategy. Protocol objects are
always built with the outermost strategy, so every callback goes through every wrapper.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from veil._validation import check_choice
from veil.dp.privacy_budget import PrivacyBudget, check_budget
from veil.errors import ConfigError, ProtocolError
from veil.fl.messages import Message
from veil.fl.protocol import (
    PROTOCOL_STAGES,
    Aggregate,
    ClientProtocol,
    ClientUpdate,
    RoundResult,
    ServerRound,
)
from veil.fl.trainer import LocalTrainer
from veil.random import Generator

if TYPE_CHECKING:
    import dp_accounting

__all__ = ["Privacy", "Strategy", "StrategyWrapper", "UpdateStrategy", "PlainServer", "PlainClient",
           "config_value", "sum_updates"]


def config_value(config: Mapping[str, Any], name: str, kind: type | tuple[type, ...], *,
                 low: float = -math.inf, high: float = math.inf) -> Any:
    """A value of a round's configuration as read by a client (ProtocolError if bad)."""
    if name not in config:
        raise ProtocolError(f"round configuration lacks {name!r}")
    value = config[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ProtocolError(f"round configuration {name}={value!r} has the wrong type")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and \
            not (math.isfinite(value) and low <= value <= high):
        raise ProtocolError(f"round configuration {name}={value!r} is outside [{low}, {high}]")
    return value


#: where a strategy's DP noise is added (:class:`Privacy`)
NOISE_AT = ("central", "local", "distributed")


@dataclass(frozen=True)
class Privacy:
    """What a strategy protects, and how: the one description a
    :class:`~veil.fl.Federation` branches on (returned by :attr:`Strategy.privacy`).

    noise: where the DP noise is added -- None (the output is not differentially private),
        "central" (by the server, trusted), "local" (by each client, on its own update) or
        "distributed" (each client adds a share; only a secure sum of the shares is
        private: hybrid and SecAgg's distributed noise).
    secure_aggregation: the transport hides single updates from the server.
    fixed_event: the round's event is the same every round, set by the configuration
        alone (never by data or earlier rounds): a federation then charges its rounds as
        one planned block (:meth:`veil.dp.Ledger.plan`), priced tightly for the whole run.
    relation: the neighbour relation the DP certificate is stated for (None: none stated).
    budget: the :class:`~veil.dp.PrivacyBudget` the noise was calibrated for (None: the
        noise was given directly); a federation's ledger must hold exactly this budget.
    """

    noise: str | None = None
    secure_aggregation: bool = False
    fixed_event: bool = False
    relation: str | None = None
    budget: PrivacyBudget | None = None

    def __post_init__(self) -> None:
        if self.noise is not None:
            check_choice(self.noise, "noise", NOISE_AT)
        elif self.fixed_event or self.budget is not None:
            raise ConfigError("Privacy(noise=None) is not allowed with fixed_event or budget: "
                              "a strategy without DP noise has no round event and no budget")
        if self.budget is not None:
            check_budget(self.budget)

    @property
    def private(self) -> bool:
        """True when the strategy's output is differentially private."""
        return self.noise is not None

    @property
    def noise_at_clients(self) -> bool:
        """True when the clients add the DP noise (local or distributed): the server sees
        noisy values during the round, so the round is charged before it runs."""
        return self.noise in ("local", "distributed")

    @property
    def needs_secure_aggregation(self) -> bool:
        """True when the noise protects only the aggregate, and no one may see single
        updates (distributed noise)."""
        return self.noise == "distributed"


def sum_updates(updates: Mapping[int, ClientUpdate], dim: int,
                extras: Sequence[str]) -> Aggregate:
    """The sums of plain updates (what secure aggregation computes without seeing them)."""
    total = np.zeros(dim)
    for u in updates.values():
        total += u.weight * u.delta
    return Aggregate(total=total, weight=float(sum(u.weight for u in updates.values())),
                     extras={k: float(sum(u.extras[k] for u in updates.values()))
                             for k in extras},
                     clients=tuple(sorted(updates)))


class Strategy(ABC):
    """Base class of federated strategies (see the module docstring).

    Subclasses implement :meth:`sample`, :meth:`client_config`, :meth:`client_update` and
    :meth:`aggregate`; the rest has defaults. Rounds are numbered ``server_round`` (0, 1,
    ...), Flower's name for them.
    """

    #: fewest client updates the server needs to complete a round
    min_clients: int = 1

    @abstractmethod
    def sample(self, server_round: int, clients: Sequence[int], rng: Generator) -> list[int]:
        """The clients asked to take part in ``server_round`` (sorted ids)."""

    def extras_bounds(self) -> dict[str, tuple[float, float]]:
        """The named scalars each client adds to its update, and their ranges."""
        return {}

    def weight_bound(self) -> float:
        """Largest aggregation weight a client may claim (inf: unbounded)."""
        return math.inf

    def update_norm_bound(self, server_round: int) -> float | None:
        """An L2 bound every client's delta respects in ``server_round`` (None: no bound)."""
        return None

    def round_event(self, server_round: int, params: np.ndarray,
                    sampled: Sequence[int], population: int) -> dp_accounting.DpEvent | None:
        """The privacy cost of one round (None: no differential privacy)."""
        return None

    def distributed_noise(self, server_round: int) -> Any:
        """The noise secure aggregation must add for ``server_round`` (None: none); see DPFedAvg."""
        return None

    @property
    def privacy(self) -> Privacy:
        """What this strategy protects, and how (:class:`Privacy`; default: nothing)."""
        return Privacy()

    def state_dict(self) -> dict[str, Any]:
        """Server-side state that changes across rounds (for checkpoints)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027 (no state)
        """Restore :meth:`state_dict`."""

    def prepare(self, model: Any) -> None:  # noqa: B027 (most strategies need nothing)
        """Set up what depends on the (initialized) model before the first round, where no
        client is built (``Federation(remote=True)``: the parties live on their nodes)."""

    # -- protocol objects ----------------------------------------------------------------
    @abstractmethod
    def server(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
               rng: Generator) -> ServerRound:
        """The server's side of ``server_round``."""

    @abstractmethod
    def client(self, client_id: int, trainer: LocalTrainer) -> ClientProtocol:
        """A client of this strategy's protocol."""


class UpdateStrategy(Strategy):
    """A strategy whose clients train locally and send updates that the server sums (the
    FedAvg family): it says what the clients are told, what each computes and how the sums
    become the next model; the transport defaults to the plain one below."""

    @abstractmethod
    def client_config(self, server_round: int) -> dict[str, Any]:
        """What the clients are told for ``server_round`` (plain numbers and text)."""

    @abstractmethod
    def client_update(self, trainer: LocalTrainer, params: np.ndarray,
                      config: Mapping[str, Any], rng: Generator) -> ClientUpdate:
        """Run on the client: local training from ``params``; the update to aggregate."""

    @abstractmethod
    def aggregate(self, server_round: int, params: np.ndarray, total: Aggregate,
                  rng: Generator) -> np.ndarray:
        """Run on the server: the next global parameters from the sums of the updates."""

    def server(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
               rng: Generator) -> ServerRound:
        """The server's side of ``server_round`` (default: plain transport)."""
        return PlainServer(self, server_round, params, sampled, rng)

    def client(self, client_id: int, trainer: LocalTrainer) -> ClientProtocol:
        """A client of this strategy's protocol (default: plain transport)."""
        return PlainClient(client_id, trainer, self)


class StrategyWrapper(UpdateStrategy):
    """A strategy that delegates to ``inner`` everything it does not override."""

    def __init__(self, inner: UpdateStrategy) -> None:
        if not isinstance(inner, UpdateStrategy):
            raise ConfigError(f"inner={type(inner).__name__} is not allowed: expected a "
                              "veil.fl strategy whose clients send updates (FedAvg, FedProx, "
                              "DPFedAvg)")
        if inner.privacy.secure_aggregation:
            raise ConfigError(f"{type(self).__name__}({type(inner).__name__}(...)) is not "
                              "allowed: secure aggregation carries the updates and must be "
                              f"the outermost wrapper, e.g. {type(inner).__name__}("
                              f"{type(self).__name__}(...))")
        self.inner = inner

    @property
    def min_clients(self) -> int:  # type: ignore[override]
        return self.inner.min_clients

    def sample(self, server_round, clients, rng):
        return self.inner.sample(server_round, clients, rng)

    def client_config(self, server_round):
        return self.inner.client_config(server_round)

    def client_update(self, trainer, params, config, rng):
        return self.inner.client_update(trainer, params, config, rng)

    def aggregate(self, server_round, params, total, rng):
        return self.inner.aggregate(server_round, params, total, rng)

    def extras_bounds(self):
        return self.inner.extras_bounds()

    def weight_bound(self):
        return self.inner.weight_bound()

    def update_norm_bound(self, server_round):
        return self.inner.update_norm_bound(server_round)

    def round_event(self, server_round, params, sampled, population):
        return self.inner.round_event(server_round, params, sampled, population)

    def distributed_noise(self, server_round):
        return self.inner.distributed_noise(server_round)

    @property
    def privacy(self) -> Privacy:
        return self.inner.privacy

    def state_dict(self):
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state):
        self.inner.load_state_dict(state.get("inner", {}))


class PlainServer(ServerRound):
    """Plain transport, one stage ``fit``: the server sends the global parameters and the
    round's configuration; each client answers with its update in the clear."""

    protocol = "plain"
    stages = PROTOCOL_STAGES["plain"]

    def __init__(self, strategy: UpdateStrategy, server_round: int, params: np.ndarray,
                 sampled: Sequence[int], rng: Generator) -> None:
        super().__init__(server_round, sampled)
        self.strategy = strategy
        self.params = params
        self.config = strategy.client_config(server_round)
        self.rng = rng

    def _begin(self) -> list[Message]:
        return [self.request(c, params=self.params, config=self.config) for c in self.clients]

    def _check(self, msg: Message) -> ClientUpdate:
        delta = msg.array("delta", dtype=np.float64, shape=self.params.shape, finite=True)
        weight = msg.number("weight", low=0.0, high=self.strategy.weight_bound())
        extras = msg.numbers("extras", self.strategy.extras_bounds())
        return ClientUpdate(delta, weight, extras)

    def _advance(self, stage: str, answers: dict[int, ClientUpdate]) -> list[Message]:
        if len(answers) < max(1, self.strategy.min_clients):
            raise ProtocolError(f"round {self.round} aborted: {len(answers)} client update(s) "
                                f"arrived; at least {max(1, self.strategy.min_clients)} needed")
        total = sum_updates(answers, self.params.size, list(self.strategy.extras_bounds()))
        params = self.strategy.aggregate(self.round, self.params, total, self.rng)
        self.result = RoundResult(params, total.clients)
        return []


class PlainClient(ClientProtocol):
    """Client of the plain transport: trains and sends its update in the clear."""

    protocol = "plain"
    stages = PROTOCOL_STAGES["plain"]

    def __init__(self, client_id: int, trainer: LocalTrainer, strategy: UpdateStrategy) -> None:
        super().__init__(client_id)
        self.trainer = trainer
        self.strategy = strategy

    def _on_fit(self, msg: Message, rng: Generator) -> list[Message]:
        params = msg.array("params", dtype=np.float64, shape=(self.trainer.n_params,),
                           finite=True)
        update = self.strategy.client_update(self.trainer, params, msg.get("config", dict), rng)
        return [self.reply(msg, delta=update.delta, weight=update.weight,
                           extras=dict(update.extras))]
