"""Sans-I/O protocol state machines: the server side of one round, and a client.

A federated round is a sequence of *stages*. In each stage the server sends requests, the
clients that are alive answer, and when the stage closes (every answer in, or the
deadline passed) the server moves on with the answers it has. Nothing here does I/O or
reads a clock: a runtime (:class:`veil.fl.runtime.LocalRuntime`, in one process or with the
clients in worker processes; later Flower) moves the :class:`~veil.fl.messages.Message`
objects and decides when a stage closes, so the same protocol code runs under every runtime.

* :class:`ServerRound` — one round on the server: :meth:`~ServerRound.start` gives the
  first requests, :meth:`~ServerRound.receive` checks and files one answer (raising
  :class:`~veil.errors.ProtocolError` for a replayed, late, duplicated-but-different,
  unknown or malformed message, which leaves the round's state untouched),
  :meth:`~ServerRound.close_stage` advances and gives the next requests, until
  :attr:`~ServerRound.result` is set. A round that cannot complete (too few answers)
  raises ProtocolError from ``close_stage``: it aborts and the global model is unchanged.
  A client whose answer fails validation is excluded from the rest of the round.
* :class:`ClientProtocol` — a client: :meth:`~ClientProtocol.handle` takes one request
  and the randomness for it (``rng``, injected by the runtime) and returns its answers.
  It rejects requests from an earlier round (replays) and stages out of order.
* :class:`Runtime` — what a runner asks of a runtime (structural): run one round, call a
  function on the clients where they live. Code below the runtimes (a protocol's runner,
  :class:`veil.fl.hybrid.HybridAggregator`) takes one as a parameter instead of choosing it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from veil.errors import ProtocolError
from veil.fl.messages import SERVER, Message
from veil.random import Generator, RngLike

__all__ = ["PROTOCOL_STAGES", "Aggregate", "ClientProtocol", "ClientUpdate", "RoundResult",
           "Runtime", "ServerRound"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClientUpdate:
    """One client's contribution: a model delta, its aggregation weight, named scalars.

    The server only ever needs the sums ``sum_k w_k delta_k``, ``sum_k w_k`` and
    ``sum_k extras_k`` (:class:`Aggregate`), which secure aggregation can compute without
    seeing any single update.
    """

    delta: np.ndarray
    weight: float = 1.0
    extras: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Aggregate:
    """Sums over the clients whose updates made it into the round."""

    total: np.ndarray           # sum_k w_k delta_k
    weight: float               # sum_k w_k
    extras: dict[str, float]    # sum_k extras_k, per name
    clients: tuple[int, ...]    # whose updates are in the sums
    l2_slack: float = 0.0       # how much encoding may add to an update's L2 norm


@dataclass(frozen=True)
class RoundResult:
    """The outcome of a completed round: the new global parameters and what went in."""

    params: np.ndarray
    clients: tuple[int, ...]
    metrics: dict[str, float] = field(default_factory=dict)


#: every protocol's stages, in order (each protocol's :attr:`ServerRound.stages` and
#: :attr:`ClientProtocol.stages`), here so that a Flower ClientApp can serve them all
#: without importing the protocols (a fresh process per message: issue 30, start-up).
#: SecAgg without its consistency round skips ``consistency``; later hybrid rounds ``join``.
PROTOCOL_STAGES: dict[str, tuple[str, ...]] = {
    "plain": ("fit",),
    "secagg": ("setup", "share_keys", "masked_input", "consistency", "unmask"),
    "hybrid": ("join", "answer", "decrypt"),
}


class ServerRound(ABC):
    """The server's side of one round (see the module docstring).

    Subclasses set :attr:`protocol` and :attr:`stages` (an instance may narrow
    ``self.stages`` to a subsequence, e.g. SecAgg without its consistency round: runtimes
    read the instance's) and implement :meth:`_begin`
    (first requests), :meth:`_check` (parse and validate one answer; raise ProtocolError)
    and :meth:`_advance` (close a stage with the valid answers; return the next requests
    or set :attr:`result`).
    """

    protocol: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]

    def __init__(self, server_round: int, clients: Iterable[int]) -> None:
        self.round = int(server_round)
        self.clients = tuple(sorted(set(int(c) for c in clients)))
        self.result: RoundResult | None = None
        self.excluded: dict[int, str] = {}
        self._stage = 0
        self._asked: set[int] = set()
        self._inbox: dict[int, Any] = {}
        self._raw: dict[int, bytes] = {}

    @property
    def stage(self) -> str:
        """The stage whose answers are being collected."""
        return self.stages[self._stage]

    @property
    def done(self) -> bool:
        return self.result is not None

    def request(self, recipient: int, **body: Any) -> Message:
        """A request of the current stage to one client."""
        return Message(self.protocol, self.round, self.stage, SERVER, recipient, body)

    def _where(self) -> str:
        return f"round {self.round}, stage {self.stage!r}"

    # -- driven by the runtime -----------------------------------------------------------
    def start(self) -> list[Message]:
        """The requests of the first stage."""
        return self._sent(self._begin())

    def receive(self, msg: Message) -> None:
        """Check one answer and file it; ProtocolError (and nothing filed) if it is bad."""
        if self.done:
            raise ProtocolError(f"round {self.round} is over; a message from {msg.origin} "
                                "arrived too late")
        if msg.protocol != self.protocol or msg.recipient != SERVER:
            raise ProtocolError(f"{self._where()}: {msg.origin} sent a {msg.protocol!r} "
                                f"message to {msg.recipient}; expected {self.protocol!r} "
                                "messages to the server")
        if msg.round != self.round:
            kind = "replayed message from the earlier" if msg.round < self.round else \
                "message for the future"
            raise ProtocolError(f"{self._where()}: {kind} round {msg.round} from "
                                f"{msg.origin} rejected")
        if msg.sender not in self.clients:
            raise ProtocolError(f"{self._where()}: message from unknown {msg.origin}, "
                                "which is not part of this round")
        if msg.sender in self.excluded:
            raise ProtocolError(f"{self._where()}: {msg.origin} was excluded from this round "
                                f"({self.excluded[msg.sender]})")
        if msg.stage != self.stage:
            late = msg.stage in self.stages[:self._stage]
            raise ProtocolError(f"{self._where()}: {msg.origin} answered stage "
                                f"{msg.stage!r} " + ("after its deadline" if late else
                                                      "which is not the current stage"))
        if msg.sender not in self._asked:
            raise ProtocolError(f"{self._where()}: {msg.origin} was not asked to take part "
                                "in this stage")
        if msg.sender in self._inbox:
            if msg.to_bytes() == self._raw[msg.sender]:
                log.debug("%s: duplicate message from %s ignored", self._where(), msg.origin)
                return
            self._exclude(msg.sender, "sent two different answers in one stage")
            raise ProtocolError(f"{self._where()}: {msg.origin} sent two different answers; "
                                "it is excluded from the round")
        try:
            parsed = self._check(msg)
        except ProtocolError as exc:
            self._exclude(msg.sender, str(exc))
            raise
        self._inbox[msg.sender] = parsed
        self._raw[msg.sender] = msg.to_bytes()

    def close_stage(self) -> list[Message]:
        """Close the current stage with the answers received; the next stage's requests.

        Raises ProtocolError when the round cannot complete (it is then aborted).
        """
        if self.done:
            raise ProtocolError(f"round {self.round} is already complete")
        answers, self._inbox, self._raw = self._inbox, {}, {}
        closing = self._closing = self._stage
        self._stage = min(closing + 1, len(self.stages) - 1)  # requests made now are for it
        out = self._advance(self.stages[closing], answers)
        if not (self.done or out):
            raise ProtocolError(f"round {self.round}: stage {self.stages[closing]!r} closed "
                                "with neither a result nor further requests")
        return self._sent(out)

    def repeat_stage(self) -> None:
        """From :meth:`_advance`: the requests it returns belong to the stage just closed
        (e.g. the same question to other clients after some failed or dropped out)."""
        self._stage = self._closing

    def _sent(self, messages: list[Message]) -> list[Message]:
        self._asked = {m.recipient for m in messages}
        return messages

    def _exclude(self, client: int, reason: str) -> None:
        self.excluded[client] = reason
        self._inbox.pop(client, None)
        self._raw.pop(client, None)

    # -- to implement ----------------------------------------------------------------------
    @abstractmethod
    def _begin(self) -> list[Message]:
        """Requests of the first stage."""

    @abstractmethod
    def _check(self, msg: Message) -> Any:
        """Parse and validate an answer of the current stage (ProtocolError if bad)."""

    @abstractmethod
    def _advance(self, stage: str, answers: dict[int, Any]) -> list[Message]:
        """Close ``stage`` with the parsed valid answers; next requests or set result."""


class ClientProtocol(ABC):
    """A client's side of a protocol (see the module docstring).

    Subclasses set :attr:`protocol` and :attr:`stages` and implement one method
    ``_on_<stage>(msg, rng) -> list[Message]`` per stage; :meth:`_new_round` resets the
    per-round state.
    """

    protocol: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]
    #: later stages that may open a round (a server that skips the first stage: e.g. the
    #: hybrid protocol's run set-up, done once per run)
    opens: ClassVar[tuple[str, ...]] = ()

    def __init__(self, client_id: int) -> None:
        if isinstance(client_id, bool) or not isinstance(client_id, (int, np.integer)) or \
                client_id < 0:
            raise ProtocolError(f"client_id={client_id!r} is not allowed: expected an "
                                "integer >= 0")
        self.client_id = int(client_id)
        self.round = -1
        self._stage = -1

    def handle(self, msg: Message, rng: Generator) -> list[Message]:
        """Process one request from the server; returns the answers to send back."""
        who = f"client {self.client_id}"
        if msg.protocol != self.protocol or msg.sender != SERVER or \
                msg.recipient != self.client_id:
            raise ProtocolError(f"{who}: rejected a {msg.protocol!r} message from "
                                f"{msg.origin} to {msg.recipient}")
        if msg.round < self.round:
            raise ProtocolError(f"{who}: rejected a replayed message from round {msg.round} "
                                f"(current round {self.round})")
        if msg.stage not in self.stages:
            raise ProtocolError(f"{who}: unknown stage {msg.stage!r}; {self.protocol} has "
                                f"{', '.join(self.stages)}")
        index = self.stages.index(msg.stage)
        if msg.round > self.round:
            if index != 0 and msg.stage not in self.opens:
                raise ProtocolError(f"{who}: round {msg.round} must start with stage "
                                    f"{self.stages[0]!r}, not {msg.stage!r}")
            self.round, self._stage = msg.round, -1
            self._new_round()
        if index <= self._stage:
            raise ProtocolError(f"{who}: stage {msg.stage!r} of round {msg.round} was already "
                                "handled (duplicate or out of order)")
        answers = getattr(self, f"_on_{msg.stage}")(msg, rng)
        self._stage = index
        return answers

    def reply(self, request: Message, **body: Any) -> Message:
        """The answer to ``request``."""
        return Message(self.protocol, request.round, request.stage, self.client_id, SERVER,
                       body)

    def _new_round(self) -> None:  # noqa: B027 (a hook: most clients keep no round state)
        """Forget the previous round's state (override when there is some)."""


class Runtime(Protocol):
    """How the messages of rounds move: :class:`veil.fl.runtime.LocalRuntime` (in this
    process or forked workers) is one; the protocols and their runners see only this."""

    def run_round(self, server: ServerRound, clients: dict[int, ClientProtocol],
                  rng: RngLike = None) -> Any:
        """Run ``server``'s round with ``clients`` to completion or abort; its report
        (:class:`veil.fl.runtime.RoundReport`: ``result`` None when it aborted, ``error``,
        traffic, time)."""

    def call(self, clients: Mapping[int, ClientProtocol], fn: Callable[..., Any],
             *args: Any) -> dict[int, Any]:
        """``fn(client, *args)`` for every client, where the client lives."""
