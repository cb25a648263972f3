"""The sans-I/O SecAgg+ round: the server's and the client's stage machines.

Protocol (five stages; U1 >= U2 >= U3 >= U4 are the clients still answering)
------------------------------------------------------------------------------
* **setup** (advertise keys): the server draws the neighbour graph (a randomly relabelled
  Harary graph of even degree, Bell et al.'s SecAgg+; the complete graph = original SecAgg)
  and sends each client the cohort (the sampled ids), its neighbours and the encoding.
  Client i checks the cohort against its **own** configuration: at least ``m_min`` clients
  (:meth:`veil.fl.strategies.SecAgg.min_cohort_of`: from N, the size of its identity table,
  and its plan's sampling), all in its identity table, it and its neighbours among them;
  then recomputes the plan (degree, threshold, noise) for that cohort and refuses any
  difference (:func:`veil.fl.secagg.ring.check_plan`). It draws two fresh X25519 key
  pairs ``(c_i, c_i^pk)`` (to encrypt shares) and ``(s_i, s_i^pk)`` (to agree on masks) and
  sends the public keys, signed with its Ed25519 identity key (Bonawitz et al. 2017,
  section 6): ``sigma_i = Sign(d_i, "keys" | ctx | i | c_i^pk | s_i^pk)``, where the round
  context ``ctx = H(run digest | round | cohort)`` (:func:`context`; the run digest hashes
  the client's own plan, minimum cohort and identity table) is what every signature of the
  round binds.
* **share_keys**: the server sends i the signed public keys of its neighbours in U1; i
  checks every signature against its own identity table (below) and refuses to go on if
  one fails (the server forged or swapped a key: it could otherwise sit in the middle of
  the share channel). Client i draws a self-mask seed ``b_i`` (32 bytes), Shamir-shares
  ``s_i`` and ``b_i`` t-of-|N1(i)| among those neighbours
  (:func:`veil.crypto.sharing.split_bytes`) and sends neighbour j its two shares encrypted
  with AES-256-GCM under ``HKDF(X25519(c_i, c_j^pk), i -> j)``.
* **masked_input**: the server forwards to i the shares sent to it (from U2) and the
  global model. Client i trains, encodes ``x_i`` and sends

      y_i = x_i + PRG(b_i) + sum_{j in U2 and N(i)} (+1 if i < j else -1) PRG(s_ij)  (mod 2^k)

  where ``s_ij = HKDF(X25519(s_i, s_j^pk))`` (both ends agree) and PRG expands a 32-byte seed
  with AES-256-CTR (or ChaCha20). Every y_i is uniform to the server.
* **consistency** (Bonawitz et al. 2017, section 6, ConsistencyCheck): the server sends each
  client of U3 (those whose masked input it kept) the set U3 itself (its ids, strictly
  increasing). Client i checks it
  (it holds i; every neighbour of i in it is one whose shares i received and masked with;
  all in the cohort), remembers it, and returns
  ``Sign(d_i, "survivors" | ctx | i | c_i^pk | s_i^pk | U3)``: its own fresh keys of this
  round make the statement unique to this round of this run (:func:`survivors_statement`),
  and a neighbour checks it with the keys it holds under i's setup signature, counting it
  only if it holds i's shares (decrypted under its own fresh key: so those keys are i's of
  this run, not keys replayed with their signature from another run). The server
  verifies each signature (a bad one drops its sender) and forwards to each signer U4 the
  signatures of its neighbours.
* **unmask**: the server asks each client of U4, for each neighbour it masked with, for
  its share of ``b_j`` (j in U3) or of ``s_j`` (j dropped after sharing). The client answers
  only if it holds at least t valid signatures, from distinct neighbours (its own does not
  count), on exactly the U3 it signed, and only asks that agree with that U3 (``b_j`` for j
  in U3, ``s_j`` for j not in U3); otherwise it refuses, naming the reason. A client never
  reveals both secrets of one neighbour. The server reconstructs each ``b_j`` (j in U3) and
  each ``s_j`` (j dropped) from at least t shares, subtracts the self-masks and the dropped
  clients' pairwise masks, and obtains ``sum_{i in U3} x_i mod 2^k``. Pairwise masks between
  survivors cancel. Each share is checked when it arrives (well-formed, of a 32-byte
  secret, at its sender's index): a malformed one drops its sender, and the secret is
  rebuilt from the other holders' shares.

A round aborts (ProtocolError, global model unchanged) when fewer than ``min_survivors``
clients remain at any stage, or when a secret cannot be reconstructed from t shares.

Threat model
------------
Clients are honest-but-curious towards each other; the **server may be malicious** (it
chooses what to forward and what to ask, and may collude with c clients); each client
trusts only its own strategy configuration (threshold above half its neighbours, its own
noise; :func:`veil.fl.secagg.ring.check_plan`) and its own identity table. A client's update
stays hidden (the server learns the sum of the survivors' updates and nothing else about it)
while fewer than t of its neighbours collude with a server that follows the protocol, and,
against one that does not, while the colluders are few enough for these checks to hold:

* *cohort*: a client's degree, threshold and noise share come from its own configuration:
  it refuses a cohort smaller than its ``m_min`` (told "2 clients", the colluder its only
  neighbour, a client once revealed both secrets 1-of-1), so the threshold is never below
  what ``m_min`` clients give, and its noise share is calibrated for the survivors of
  ``m_min`` clients (:mod:`veil.fl.strategies.secagg`);
* *context*: every signature binds the round's context (plan, identity table, round,
  cohort) and its stage; the survivor-set signature also binds the signer's fresh keys of
  the round, so no signature is accepted in another round or another run (a replayed one
  counts as missing);
* *keys*: every X25519 key a client uses is signed by its owner, so the server cannot
  substitute its own (``SecAgg(consistency=False)`` leaves this out: semi-honest server,
  and no minimum cohort beyond ``SecAgg(min_cohort=...)``, since the client then has no
  identity table to count the federation by);
* *survivor set*: an honest neighbour reveals the self-mask share of a client only for a
  survivor set that excludes no one it reveals a mask-key share of, and only after t of its
  own neighbours signed that very set; each honest client signs one set per round. On the
  complete graph (n clients, original SecAgg) two honest clients shown different sets need
  t - c honest signers each besides themselves, so ``2 (t - c + 1) <= n - c``: a server
  colluding with ``c < 2t - n + 2`` clients cannot show two honest clients different
  survivor sets (without this round the bound is ``c < 2t - n + 1``, from the shares
  alone), and so cannot recover a client's self-mask seed and its mask key both. Raise
  ``SecAgg(threshold=...)`` to tolerate more colluders. On the sparse SecAgg+ graph a
  client can only count its own neighbours' signatures: the server must then give every
  holder it deceives t neighbours that were shown the same set, which the shares alone did
  not demand, but two holders of one client may have few neighbours in common, so no bound
  as clean as the complete graph's is claimed here: where the survivor set must be
  consistent against colluders, use the complete graph (``neighbours=None``) or a
  threshold well above half.

Budget. With distributed noise the guarantee is meant to hold against the server, so a
client with its own ledger (:meth:`SecAggClient.use_ledger`) does not rely on the server's:
at masked_input, after its checks and before it trains or draws noise, it charges the
round's cost ``ZCDpEvent(rho)`` of its *own* plan (rho from its own noise multiplier; the
server's announced plan must equal it, :func:`veil.fl.secagg.ring.check_plan`) to its own
ledger, once per round, and drops out of the round (BudgetExceededError naming the round
and the budget, nothing charged) when the budget cannot pay.

A setup signature replayed from another run (the round context repeats when the plan,
table, round and cohort do) carries keys whose secrets the server does not hold: their
owner's shares do not decrypt under them, so that neighbour is a dropout to the client, and
its survivor-set signatures are not counted. Not protected: which clients took
part (the server sees it), the correctness of the sum
(a malicious server or client can change the model; SecAgg protects privacy, not
integrity), and availability (a malicious server can always abort a round).

Identity table. Client i's identity key ``d_i`` is an Ed25519 key (:mod:`veil.crypto.identity`);
the table of public keys is what every client trusts, bound to client ids before any round
and not sent by the server. In a simulation (local runtime, worker processes, Flower's
simulation engine) the runner is the trusted set-up: :meth:`veil.fl.strategies.SecAgg.client`
makes each client's key pair from the CSPRNG when it makes the client, gives the private key
to that client only and records the public key in the table every client reads (a worker
process or Flower node gets its own copy with its client, made before round 0). In a
deployment each party makes its key pair and the table is distributed out of band, as a
deployment distributes its parties' certificates.

Shares are checked for consistency (:func:`veil.crypto.sharing.combine_bytes` rejects a
share off the polynomial). The encoding is :mod:`veil.fl.secagg.ring`, the key agreement and
the masks :mod:`veil.fl.secagg.masks`; :class:`veil.fl.strategies.SecAgg` plans each round,
seen here only as a :class:`~veil.fl.secagg.planner.RoundPlanner`.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil.crypto.identity import SIGNATURE, public_identity, sign, verify
from veil.crypto.sharing import (
    ShamirShare,
    combine_bytes,
    combine_bytes_many,
    shares_from_bytes,
    split_bytes,
)
from veil.errors import ConfigError, CryptoError, ProtocolError
from veil.fl.messages import Message, decode, encode
from veil.fl.party_ledger import RoundLedger
from veil.fl.protocol import PROTOCOL_STAGES, Aggregate, ClientProtocol, RoundResult, ServerRound
from veil.fl.secagg.masks import KEY, agree, agree_many, channel_info, mask_info, prg, public_key
from veil.fl.secagg.planner import RoundPlanner
from veil.fl.secagg.ring import (
    CLIPPED,
    WEIGHT,
    Plan,
    check_plan,
    decode_sum,
    encode_update,
    reduce_ring,
    ring_dtype,
)
from veil.fl.trainer import LocalTrainer
from veil.random import Generator, noise_rng, secure_rng

if TYPE_CHECKING:
    from veil.dp.ledger import Ledger

__all__ = ["SecAggClient", "SecAggServer", "harary"]

log = logging.getLogger(__name__)

#: the stages with the malicious-server checks, and without them (``consistency=False``)
STAGES = PROTOCOL_STAGES["secagg"]
SEMI_HONEST_STAGES = tuple(s for s in STAGES if s != "consistency")


def context(run: bytes, server_round: int, cohort: Sequence[int]) -> bytes:
    """What every signature of a round binds besides its stage and payload: the run digest
    (:meth:`veil.fl.strategies.SecAgg.run_digest`: the signer's own plan and identity
    table), the round and the cohort (the sampled ids, strictly increasing)."""
    return hashlib.sha256(b"veil.secagg.round|" + run + b"|%d|" % server_round +
                          np.ascontiguousarray(cohort, dtype="<i8").tobytes()).digest()


def keys_statement(ctx: bytes, client: int, c_pk: bytes, s_pk: bytes) -> bytes:
    """What client ``client`` signs at setup: its two fresh (32-byte) public keys of this
    round, under the round's :func:`context`."""
    return b"veil.secagg.keys|" + ctx + b"|%d|" % client + c_pk + s_pk


def survivors_statement(ctx: bytes, client: int, keys: Sequence[bytes],
                        survivors: np.ndarray) -> bytes:
    """What client ``client`` signs in the consistency round: the survivor set U3 it was
    shown (the strictly increasing int64 ids the server sends), under the round's
    :func:`context` and its own fresh keys of this round (``keys``: c_pk, s_pk, which its
    neighbours hold under its setup signature). Fresh keys make the statement unique to
    this round of this run: a signature from another run never verifies."""
    return b"veil.secagg.survivors|" + ctx + b"|%d|" % client + b"".join(keys) + \
        np.ascontiguousarray(survivors, dtype="<i8").tobytes()


def harary(clients: Sequence[int], degree: int, rng: Generator) -> dict[int, tuple[int, ...]]:
    """Neighbours in a Harary graph of even ``degree`` on a random ordering of the clients
    (the complete graph when degree >= m - 1)."""
    m = len(clients)
    if degree >= m - 1:
        return {c: tuple(d for d in clients if d != c) for c in clients}
    order = [int(c) for c in rng.permutation(np.asarray(clients))]
    half = degree // 2
    out = {}
    for idx, c in enumerate(order):
        near = {order[(idx + o) % m] for o in range(-half, half + 1) if o != 0}
        out[c] = tuple(sorted(near))
    return out


class SecAggServer(ServerRound):
    """The server's side of one SecAgg+ round (see the module docstring)."""

    protocol = "secagg"
    stages = STAGES

    def __init__(self, strategy: RoundPlanner, server_round: int, params: np.ndarray,
                 sampled: Sequence[int], rng: Generator) -> None:
        super().__init__(server_round, sampled)
        self.strategy = strategy
        self.consistency = strategy.consistency
        if not self.consistency:
            self.stages = SEMI_HONEST_STAGES  # type: ignore[misc]
        self.params = params
        self.rng = rng
        population = strategy.population()
        self.min_cohort = strategy.min_cohort_of(population)
        self.plan = strategy.plan(server_round, params, self.clients, population=population)
        self.context = context(strategy.run_digest(self.plan, strategy.identities),
                               server_round, self.clients)
        self.graph = harary(self.clients, self.plan.degree, rng)
        self.config = strategy.client_config(server_round)
        self.keys: dict[int, tuple[bytes, bytes]] = {}
        self.holders: dict[int, tuple[int, ...]] = {}    # N1(i): who holds i's shares
        self._index: dict[int, dict[int, int]] = {}      # i -> holder -> its share's x
        self.partners: dict[int, tuple[int, ...]] = {}   # U2 and N(i): i's mask partners
        self.masked_sum: np.ndarray | None = None
        self.survivors: tuple[int, ...] = ()
        self.dropped: tuple[int, ...] = ()

    @property
    def _length(self) -> int:
        return self.params.size + len(self.plan.extras)

    def _enough(self, alive: Sequence[int], stage: str) -> None:
        if len(alive) < self.plan.min_survivors:
            raise ProtocolError(f"round {self.round} aborted after stage {stage!r}: only "
                                f"{len(alive)} of {len(self.clients)} clients can go on, "
                                f"min_survivors={self.plan.min_survivors} (too many dropouts)")

    def _begin(self) -> list[Message]:
        self._enough(self.clients, "sampling")
        if len(self.clients) < self.min_cohort:
            raise ProtocolError(f"round {self.round} aborted: {len(self.clients)} clients "
                                f"sampled, min_cohort={self.min_cohort} (every client would "
                                "refuse it)")
        return [self.request(c, config=self.config, neighbours=list(self.graph[c]),
                             cohort=list(self.clients), secagg=self.plan.public())
                for c in self.clients]

    def _check(self, msg: Message) -> Any:
        i = msg.sender
        if self.stage == "setup":
            c_pk, s_pk = msg.blob("c_pk", size=KEY), msg.blob("s_pk", size=KEY)
            if not self.consistency:
                return c_pk, s_pk, b""
            signature = msg.blob("signature", size=SIGNATURE)
            self._check_signature(msg, signature, keys_statement(self.context, i, c_pk, s_pk))
            return c_pk, s_pk, signature
        if self.stage == "share_keys":
            cts = msg.table("ciphertexts", allowed=set(self.holders[i]))
            if set(cts) != set(self.holders[i]):
                raise msg.error("ciphertexts", f"covers {sorted(cts)}; expected one share "
                                                f"for each of {list(self.holders[i])}")
            return cts
        if self.stage == "masked_input":
            masked = msg.array("masked", dtype=ring_dtype(self.plan.bits),
                               shape=(self._length,))
            if masked.size and int(masked.max()) >> self.plan.bits:
                raise msg.error("masked", f"holds values outside Z_2^{self.plan.bits}")
            used = msg.ids("partners", allowed=set(self.partners[i]))
            if len(used) < self.plan.threshold:
                raise msg.error("partners", f"names {len(used)} partners; the threshold is "
                                            f"{self.plan.threshold}")
            return masked, frozenset(used)
        if self.stage == "consistency":
            signature = msg.blob("signature", size=SIGNATURE)
            self._check_signature(msg, signature, survivors_statement(
                self.context, i, self.keys[i], self._u3))
            return signature
        asked_b, asked_s = self._asked_for[i]
        seeds = msg.table("seed_shares", allowed=set(asked_b))
        keys = msg.table("key_shares", allowed=set(asked_s))
        if set(seeds) != set(asked_b) or set(keys) != set(asked_s):
            raise msg.error("seed_shares", "or 'key_shares' do not answer every request")
        # parsed and checked here, so that one client's malformed share drops that client
        # (ProtocolError from _check), never the round
        asked = [("seed_shares", j, raw) for j, raw in seeds.items()] + \
            [("key_shares", j, raw) for j, raw in keys.items()]
        try:   # all at once; one by one only to name a malformed one
            parsed = shares_from_bytes([raw for _, _, raw in asked])
        except CryptoError:
            parsed = [None] * len(asked)
        shares = [self._share(msg, field, j, raw, share)
                  for (field, j, raw), share in zip(asked, parsed)]
        return dict(zip(seeds, shares[:len(seeds)])), dict(zip(keys, shares[len(seeds):]))

    def _share(self, msg: Message, field: str, owner: int, raw: bytes,
               share: ShamirShare | None = None) -> ShamirShare:
        """The sender's share of ``owner``'s secret (``share``: ``raw`` already parsed):
        well-formed, of a 32-byte secret, at the sender's own index among ``owner``'s
        holders (ProtocolError naming it otherwise)."""
        if share is None:
            try:
                share = ShamirShare.from_bytes(raw)
            except CryptoError as exc:
                raise msg.error(field, f"holds a malformed share of client {owner}'s secret: "
                                       f"{exc}") from None
        index = self._index[owner][msg.sender]
        if share.x != index or share.length != KEY:
            raise msg.error(field, f"holds a share of client {owner}'s secret at x={share.x} "
                                   f"of {share.length} bytes; expected x={index}, {KEY} bytes")
        return share

    def _check_signature(self, msg: Message, signature: bytes, statement: bytes) -> None:
        """ProtocolError (the sender is dropped) unless ``signature`` is the sender's."""
        if not verify(self.strategy.identities.get(msg.sender), signature, statement):
            raise msg.error("signature", f"is not a valid signature of client {msg.sender} "
                                         "(identity table) on this round's statement")

    def _advance(self, stage: str, answers: dict[int, Any]) -> list[Message]:
        return getattr(self, f"_after_{stage}")(answers)

    def _after_setup(self, answers: dict[int, tuple[bytes, bytes, bytes]]) -> list[Message]:
        # Exclude, until none is left to exclude, every client with fewer than t live
        # neighbours: one exclusion can leave a neighbour short in turn, and a client whose
        # shares went to an excluded holder could not be unmasked later.
        alive = set(answers)
        while short := {i for i in alive
                        if sum(j in alive for j in self.graph[i]) < self.plan.threshold}:
            for i in short:
                self.excluded[i] = "too few neighbours alive to share its secrets"
            alive -= short
        self._enough(sorted(alive), "setup")
        self.keys = {i: answers[i][:2] for i in alive}
        signed = {i: [*answers[i][:2], answers[i][2]] if self.consistency else [*answers[i][:2]]
                  for i in alive}
        out = []
        for i in sorted(alive):
            self.holders[i] = tuple(j for j in self.graph[i] if j in alive)
            self._index[i] = {j: x for x, j in enumerate(self.holders[i], start=1)}
            out.append(self.request(i, keys={j: signed[j] for j in self.holders[i]}))
        return out

    def _after_share_keys(self, answers: dict[int, dict[int, bytes]]) -> list[Message]:
        self._shared = set(answers)
        out = []
        for i in sorted(answers):
            incoming = {j: answers[j][i] for j in sorted(answers) if i in answers[j]}
            self.partners[i] = tuple(incoming)
            if len(incoming) < self.plan.threshold:
                self.excluded[i] = "too few neighbours shared their secrets with it"
                continue
            out.append(self.request(i, params=self.params, ciphertexts=incoming))
        self._enough([m.recipient for m in out], "share_keys")
        return out

    def _after_masked_input(self, answers: dict[int, tuple[np.ndarray, frozenset]]
                            ) -> list[Message]:
        # A client whose share ciphertext a neighbour could not decrypt is treated as
        # dropped: its masked input is left out, and its mask key recovered so that the
        # masks of the partners that did use it can be removed (the neighbour that
        # rejected it never masked with it).
        self.used = {i: used for i, (_, used) in answers.items()}
        blamed = {j for i, used in self.used.items() for j in set(self.partners[i]) - used}
        for j in sorted(blamed & set(answers)):
            self.excluded[j] = "a neighbour could not decrypt its share"
            log.warning("round %d: client %d's share did not decrypt at a neighbour: client "
                        "%d is treated as dropped", self.round, j, j)
        self.survivors = tuple(sorted(set(answers) - blamed))
        self._enough(self.survivors, "masked_input")
        total = np.zeros(self._length, dtype=ring_dtype(self.plan.bits))
        for i in self.survivors:
            total += answers[i][0]
        self.masked_sum = total
        self.dropped = tuple(sorted(self._shared - set(self.survivors)))
        if not self.consistency:
            return self._unmask_requests(self.survivors, {})
        self._u3 = np.asarray(self.survivors, dtype=np.int64)
        return [self.request(i, survivors=self._u3) for i in self.survivors]

    def _after_consistency(self, answers: dict[int, bytes]) -> list[Message]:
        signers = sorted(answers)
        self._enough(signers, "consistency")
        return self._unmask_requests(signers, answers)

    def _unmask_requests(self, clients: Sequence[int], signatures: dict[int, bytes]
                         ) -> list[Message]:
        """Ask each client for its shares of the secrets of the neighbours it masked with
        (with the survivor-set signatures of its neighbours, when there is a consistency
        round)."""
        alive, gone = set(self.survivors), set(self.dropped)
        self._asked_for: dict[int, tuple[list[int], list[int]]] = {}
        out = []
        for i in clients:
            ask = ([j for j in sorted(self.used[i]) if j in alive],
                   [j for j in sorted(self.used[i]) if j in gone])
            self._asked_for[i] = ask
            extra = {"signatures": {j: signatures[j] for j in self.graph[i]
                                    if j in signatures}} if self.consistency else {}
            out.append(self.request(i, survivors=ask[0], dropped=ask[1], **extra))
        return out

    def _after_unmask(self, answers: dict[int, tuple[dict, dict]]) -> list[Message]:
        plan, n = self.plan, self._length
        total = self.masked_sum.copy()
        # the dropped clients whose mask key must be rebuilt: those a survivor masked with
        alive = set(self.survivors)
        users = {owner: [k for k in self.partners.get(owner, ())
                         if k in alive and owner in self.used[k]]
                 for owner in self.dropped}
        wanted = [(owner, 0, "self-mask seed") for owner in self.survivors] + \
            [(owner, 1, "mask key") for owner in self.dropped if users[owner]]
        secrets = self._reconstruct_all(wanted, answers)
        for owner in self.survivors:
            total -= prg(secrets[owner, 0], n, plan.bits, plan.prg)
        for owner, kind, _ in wanted[len(self.survivors):]:   # its partners' seeds s_ok
            seeds = agree_many(secrets[owner, kind], [(self.keys[k][1],
                                                        mask_info(self.round, owner, k))
                                                       for k in users[owner]])
            for k, seed in zip(users[owner], seeds):
                mask = prg(seed, n, plan.bits, plan.prg)
                # k added +mask if k < owner, else -mask: remove it
                if k < owner:
                    total -= mask
                else:
                    total += mask
        reduce_ring(total, plan.bits)
        d = self.params.size
        sums, scalars = decode_sum(total, d, plan)
        weight = scalars.pop(WEIGHT)
        clipped = scalars.pop(CLIPPED, None)
        aggregate = Aggregate(total=sums, weight=weight, extras=scalars,
                              clients=self.survivors, l2_slack=math.sqrt(d) / (2 * plan.scale))
        params = self.strategy.aggregate(self.round, self.params, aggregate, self.rng)
        metrics = {"survivors": len(self.survivors), "degree": plan.degree,
                   "threshold": plan.threshold,
                   "quantization_error": len(self.survivors) / (2 * plan.scale)}
        if clipped is not None:
            metrics["clipped_fraction"] = clipped / max(len(self.survivors), 1)
        self.result = RoundResult(params, self.survivors, metrics)
        return []

    def _reconstruct_all(self, wanted: list[tuple[int, int, str]],
                         answers: dict[int, tuple[dict, dict]]) -> dict[tuple[int, int], bytes]:
        """The secrets ``(owner, kind, what)`` (kind 0: the self-mask seed, 1: the mask key)
        from their holders' shares (each checked in :meth:`_check`), all interpolated at
        once; one by one only to name the one that cannot be rebuilt."""
        shares = [[a[kind][owner] for _, a in sorted(answers.items()) if owner in a[kind]]
                  for owner, kind, _ in wanted]
        if all(len(s) >= self.plan.threshold for s in shares):
            try:
                return dict(zip([(owner, kind) for owner, kind, _ in wanted],
                                combine_bytes_many(shares)))
            except CryptoError:
                pass
        return {(owner, kind): self._reconstruct(owner, s, what)
                for (owner, kind, what), s in zip(wanted, shares)}

    def _reconstruct(self, owner: int, shares: list[ShamirShare], what: str) -> bytes:
        """``owner``'s secret from its holders' shares, in the holders' order (ProtocolError
        naming the owner if it cannot be rebuilt)."""
        if len(shares) < self.plan.threshold:
            raise ProtocolError(f"round {self.round} aborted: client {owner}'s {what} cannot "
                                f"be recovered: {len(shares)} share(s), threshold "
                                f"{self.plan.threshold} (too many dropouts)")
        try:
            return combine_bytes(shares)
        except CryptoError as exc:
            raise ProtocolError(f"round {self.round} aborted: client {owner}'s {what} could "
                                f"not be reconstructed: {exc}") from None


class SecAggClient(ClientProtocol):
    """A client of SecAgg+ (see the module docstring). Secrets live only in this object."""

    protocol = "secagg"
    stages = STAGES

    def __init__(self, client_id: int, trainer: LocalTrainer, strategy: RoundPlanner, *,
                 identity: bytes | None = None,
                 directory: Mapping[int, bytes] | None = None) -> None:
        """``identity``: this client's Ed25519 private key; ``directory``: the identity
        table it trusts (client id -> public key; see the module docstring). Both are
        needed unless ``strategy.consistency`` is False (a deployed client may get its key
        later, where it runs: :meth:`use_identity`)."""
        super().__init__(client_id)
        self.trainer = trainer
        self.strategy = strategy
        self._directory = directory
        self._identity: bytes | None = None
        self.ledger: RoundLedger | None = None
        if not strategy.consistency:
            self.stages = SEMI_HONEST_STAGES  # type: ignore[misc]
        elif directory is None:
            raise ConfigError(f"client {client_id} needs its own identity key, whose public "
                              "key is its entry of the identity table directory=")
        elif identity is not None:
            self.use_identity(identity)
        self._new_round()

    def use_identity(self, identity: bytes) -> None:
        """Take this client's Ed25519 private key (ConfigError unless its public key is the
        client's entry of its identity table)."""
        if self._directory is None or \
                self._directory.get(self.client_id) != public_identity(identity):
            raise ConfigError(f"client {self.client_id}: this identity key is not its own: "
                              "its public key is not the client's entry of the identity "
                              "table")
        self._identity = identity

    def use_ledger(self, ledger: Ledger, rounds: int) -> None:
        """Charge this client's own ``ledger`` over the ``rounds`` of its own plan: with
        distributed noise each round's cost, from this client's own plan (its noise
        multiplier and sampling; module docstring, Budget), is charged once before its
        noisy masked input leaves it (:class:`veil.fl.party_ledger.RoundLedger`)."""
        self.ledger = RoundLedger(ledger, rounds, fixed=self.strategy.privacy.fixed_event,
                                  who=f"client {self.client_id}")

    def _new_round(self) -> None:
        self._plan: Plan | None = None
        self._config: dict[str, Any] = {}
        self._neighbours: list[int] = []
        self._c_sk = self._s_sk = self._b = b""
        self._keys: dict[int, list[bytes]] = {}
        self._held: dict[int, tuple[bytes, bytes]] = {}
        self._cohort: list[int] = []
        self._context = b""
        self._survivors: frozenset[int] | None = None   # the U3 this client signed
        self._u3 = np.zeros(0, dtype=np.int64)

    def _on_setup(self, msg: Message, rng: Generator) -> list[Message]:
        who = f"client {self.client_id}, round {msg.round}"
        self._neighbours = msg.ids("neighbours")
        if self.client_id in self._neighbours:
            raise ProtocolError(f"{who}: listed as its own neighbour")
        cohort = msg.ids("cohort")
        population = self.strategy.population() if self._directory is None else \
            len(self._directory)
        if cohort != sorted(cohort) or self.client_id not in cohort or \
                not set(self._neighbours) <= set(cohort) or (
                    self._directory is not None and not set(cohort) <= set(self._directory)):
            raise msg.error("cohort", "is not a strictly increasing list of clients of the "
                                      "identity table holding this client and its neighbours")
        least = self.strategy.min_cohort_of(population)
        if len(cohort) < least:
            raise ProtocolError(f"{who}: a cohort of {len(cohort)} clients; this client's own "
                                f"configuration allows no fewer than {least} (of "
                                f"{population} in its identity table): refused")
        announced = msg.get("secagg", dict).get("clip_range")
        if not isinstance(announced, float) or not 0 < announced < math.inf:
            raise msg.error("secagg", f"has clip_range={announced!r}")
        own = self.strategy.plan(msg.round, np.zeros(self.trainer.n_params),
                                 cohort, clip_range=announced, population=population)
        self._plan = check_plan(msg, own, self._neighbours)
        self._cohort = cohort
        self._context = context(self.strategy.run_digest(own, self._directory or {}),
                                msg.round, cohort)
        self._config = msg.get("config", dict)
        keys = secure_rng()  # never the run's seed: see veil.random
        self._c_sk, self._s_sk = keys.bytes(KEY), keys.bytes(KEY)
        c_pk, s_pk = public_key(self._c_sk), public_key(self._s_sk)
        if not self.strategy.consistency:
            return [self.reply(msg, c_pk=c_pk, s_pk=s_pk)]
        if self._identity is None:
            raise ProtocolError(f"client {self.client_id} has no identity key to sign with "
                                "(a deployed client gets it with use_identity): not taking "
                                "part")
        signature = sign(self._identity, keys_statement(self._context, self.client_id, c_pk,
                                                        s_pk))
        return [self.reply(msg, c_pk=c_pk, s_pk=s_pk, signature=signature)]

    def _on_share_keys(self, msg: Message, rng: Generator) -> list[Message]:
        keys = msg.table("keys", allowed=set(self._neighbours), value=list)
        signed = self.strategy.consistency
        for j, entry in keys.items():
            pair = entry[:2]
            if len(entry) != 2 + signed or not all(isinstance(k, bytes) and len(k) == KEY
                                                    for k in pair):
                raise msg.error("keys", f"entry for client {j} is not two {KEY}-byte keys"
                                        + (" and a signature" if signed else ""))
            if signed and not verify(self._directory.get(j), entry[2],
                                     keys_statement(self._context, j, *pair)):
                raise ProtocolError(f"client {self.client_id}, round {msg.round}: the keys "
                                    f"forwarded for client {j} do not carry its signature "
                                    "(identity table): refusing to share with them")
            keys[j] = pair
        t = self._plan.threshold
        if len(keys) < t:
            raise ProtocolError(f"client {self.client_id}: {len(keys)} neighbours alive, "
                                f"threshold {t}: aborting")
        self._keys = keys
        secure = secure_rng()  # self-mask seed and share polynomials: never the run's seed
        self._b = secure.bytes(KEY)
        holders = sorted(keys)
        s_shares = split_bytes(self._s_sk, len(holders), t, rng=secure)
        b_shares = split_bytes(self._b, len(holders), t, rng=secure)
        out = {}
        for x, j in enumerate(holders):
            key = agree(self._c_sk, keys[j][0], channel_info(msg.round, self.client_id, j))
            plain = encode([self.client_id, j, s_shares[x].to_bytes(), b_shares[x].to_bytes()])
            out[j] = AESGCM(key).encrypt(bytes(12), plain, channel_info(msg.round,
                                                                    self.client_id, j))
        return [self.reply(msg, ciphertexts=out)]

    def _on_masked_input(self, msg: Message, rng: Generator) -> list[Message]:
        plan = self._plan
        params = msg.array("params", dtype=np.float64, shape=(self.trainer.n_params,),
                           finite=True)
        incoming = msg.table("ciphertexts", allowed=set(self._keys))
        for j, ct in incoming.items():
            share = self._open_share(msg.round, j, ct)
            if share is None:  # that neighbour is treated as dropped (server is told below)
                log.warning("client %d, round %d: the share from client %d does not decrypt "
                            "or is misaddressed: not masking with it", self.client_id,
                            msg.round, j)
            else:
                self._held[j] = share
        if len(self._held) < plan.threshold:
            raise ProtocolError(f"client {self.client_id}: valid shares from "
                                f"{len(self._held)} neighbours, threshold {plan.threshold}: "
                                "aborting")
        if self.ledger is not None and plan.event is not None:
            # before any noisy value is computed; BudgetExceededError: a dropout, named
            self.ledger.charge(msg.round, plan.event)
        update = self.strategy.client_update(self.trainer, params, self._config, rng)
        y = encode_update(update.delta, update.weight, update.extras, plan, noise_rng(rng))
        y += prg(self._b, y.size, plan.bits, plan.prg)
        for j in sorted(self._held):
            mask = prg(agree(self._s_sk, self._keys[j][1],
                               mask_info(msg.round, self.client_id, j)),
                        y.size, plan.bits, plan.prg)
            if self.client_id < j:
                y += mask
            else:
                y -= mask
        return [self.reply(msg, masked=reduce_ring(y, plan.bits), partners=sorted(self._held))]

    def _open_share(self, round: int, j: int, ct: bytes) -> tuple[bytes, bytes] | None:
        """Neighbour j's two shares for this client, or None if they do not decrypt."""
        info = channel_info(round, j, self.client_id)
        try:
            plain = AESGCM(agree(self._c_sk, self._keys[j][0], info)).decrypt(
                bytes(12), ct, info)
            owner, holder, s_share, b_share = decode(plain)
        except (InvalidTag, ProtocolError, ValueError, TypeError):
            return None
        if (owner, holder) != (j, self.client_id) or not all(
                isinstance(b, bytes) for b in (s_share, b_share)):
            return None
        return s_share, b_share

    def _on_consistency(self, msg: Message, rng: Generator) -> list[Message]:
        u3 = msg.array("survivors", dtype=np.int64)
        if u3.ndim != 1 or u3.size and (u3[0] < 0 or np.any(u3[1:] <= u3[:-1])):
            raise msg.error("survivors", "is not a strictly increasing array of client ids")
        who = f"client {self.client_id}, round {msg.round}"
        survivors = frozenset(u3.tolist())
        if self.client_id not in survivors:
            raise ProtocolError(f"{who}: shown a survivor set without itself: refusing to "
                                "sign it")
        if not survivors <= set(self._cohort):
            raise ProtocolError(f"{who}: shown survivors {sorted(survivors - set(self._cohort))}"
                                " outside the round's cohort: refusing to sign")
        unknown = (survivors & set(self._neighbours)) - set(self._held)
        if unknown:
            raise ProtocolError(f"{who}: the survivor set names neighbours {sorted(unknown)}, "
                                "whose shares it never received: refusing to sign")
        self._survivors, self._u3 = survivors, u3
        mine = (public_key(self._c_sk), public_key(self._s_sk))
        statement = survivors_statement(self._context, self.client_id, mine, u3)
        return [self.reply(msg, signature=sign(self._identity, statement))]

    def _check_consistency(self, msg: Message, survivors: list[int],
                           dropped: list[int]) -> None:
        """ProtocolError (no share revealed) unless t neighbours signed the survivor set
        this client signed, and the server's asks agree with that set."""
        who = f"client {self.client_id}, round {msg.round}"
        if self._survivors is None:
            raise ProtocolError(f"{who}: asked to unmask without a consistency round: "
                                "refusing")
        signatures = msg.table("signatures")
        t, valid, neighbours = self._plan.threshold, 0, set(self._neighbours)
        for j, signature in signatures.items():   # t valid ones suffice
            if valid == t:
                break
            # only a neighbour whose shares it holds: it decrypted them under its own fresh
            # key, so the keys it checks the signature with are that neighbour's of this run
            valid += j in neighbours and j in self._held and verify(
                self._directory.get(j), signature,
                survivors_statement(self._context, j, self._keys[j], self._u3))
        if valid < t:
            raise ProtocolError(f"{who}: {valid} valid signatures of its neighbours on the "
                                f"survivor set it signed ({len(signatures)} forwarded), "
                                f"threshold {t}: others may have been shown another set; "
                                "refusing to unmask")
        stale = set(dropped) & self._survivors
        if stale or not set(survivors) <= self._survivors:
            raise ProtocolError(f"{who}: the unmask request disagrees with the survivor set "
                                f"it signed (clients "
                                f"{sorted(stale | (set(survivors) - self._survivors))}): "
                                "refusing to unmask")

    def _on_unmask(self, msg: Message, rng: Generator) -> list[Message]:
        survivors = msg.ids("survivors", allowed=set(self._held))
        dropped = msg.ids("dropped", allowed=set(self._held))
        both = set(survivors) & set(dropped)
        if both:
            raise ProtocolError(f"client {self.client_id}: the server asked for both secrets "
                                f"of clients {sorted(both)}; refusing")
        if self.strategy.consistency:
            self._check_consistency(msg, survivors, dropped)
        plan = self._plan
        if (plan.rho is not None and plan.degree == len(self._cohort) - 1
                and len(survivors) + 1 < plan.min_survivors):
            raise ProtocolError(f"client {self.client_id}: only {len(survivors) + 1} "
                                f"survivors, but the distributed noise needs "
                                f"{plan.min_survivors}: refusing to unmask")
        return [self.reply(msg, seed_shares={j: self._held[j][1] for j in survivors},
                           key_shares={j: self._held[j][0] for j in dropped})]
