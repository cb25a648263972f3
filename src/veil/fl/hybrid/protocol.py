"""The hybrid protocol (Truex et al., AISec 2019): threshold-Paillier sums of noisy answers.

Roles and trust
---------------
n parties hold data; an aggregator (the server) coordinates; a **dealer** sets up the keys.
t is the minimum number of honest, non-colluding parties; the decryption threshold is
``threshold = n - t + 1``, so the at most ``n - t`` colluding parties can never decrypt on
their own, and up to ``t - 1`` parties may drop out before decryption. Assumptions: the
dealer is trusted to generate the threshold key and hand each party its own share over a
private channel, then to forget them (:func:`deal_keys`; the strategy objects hand each
share to its party and keep none); at least t of the n parties are honest. Every party
must answer: an encrypted sum has no quorum below n (``min_answers`` is n or None for the
encrypted methods; the clear baselines keep it). With a quorum q < n a malicious aggregator
could have two groups decrypt two sums whose difference is one party's answer with only its
own noise share, or drop honest answers down to q, leaving ``q - (n - t)`` honest noise
shares where t were charged (n = 10, t = 8, q = 8: true epsilon 1.169 for 0.999 charged).
Parties may still drop out at decryption (up to ``t - 1``); a party missing from the
answers aborts the round.

The aggregator may be **malicious**: each party trusts only its own configuration.

* A party answers only a query whose shape is in its own learner's plan (the noise and
  the sensitivity come from its own copy of the plan, never from the aggregator), at most
  as many queries as the plan has, and charges each to its own Ledger when it has one.
* A run has an id agreed before its first query: at the run's first round (stage
  ``join``) each party sends a fresh 32-byte nonce (CSPRNG), the aggregator sends every
  party all n nonces with the query, and each party checks its own is there and takes
  ``run = H(agreement, session key, nonce_0, ..., nonce_{n-1})`` (:func:`run_id`); the
  run's later rounds skip the join (a party that has not joined refuses to answer, and a
  new join forgets the old id).
* Each answer is signed by its party (Ed25519; the parties' identity keys are public in
  the :class:`Agreement`) over ``run | round | party | H(query) | H(ciphertexts)``, the
  query hashed whole (name, shape and spec: for a gradient query, the model parameters it
  is asked at). A party partially decrypts only the product it computes itself from the
  answers of **all n** parties, each under a valid signature on its own run id, round and
  query, and only once per round. So the aggregator is no decryption oracle: it cannot
  have one party's answer decrypted alone (it cannot forge the other parties' answers),
  nor a stack of answers, nor two different sums whose difference is one answer (there is
  one set of all n answers per run, round and query: an honest party signs one answer per
  round), nor mix in answers from another round, another run, or another model point.

Set-up (public :class:`Agreement`): n, t, the noise family and its multiplier z
(calibrated from the learner's plan and the budget, :func:`veil.fl.hybrid.fit.plan_multiplier`),
delta, and how answers are encoded. Parties derive their noise from the agreement and the
query's shape, never from the aggregator.

One query = one round, stages ``answer`` and ``decrypt`` (after ``join`` in a run's first
round):

1. **answer** -- the aggregator sends the query (name, shape, spec). Party i computes
   ``Q_s(D_i)`` (the learner's ``answer``), clips it into the query's bound and puts it on
   the integer grid with its noise share (:func:`veil.fl.hybrid.grid.contribute`; values
   clipped are counted by the party and logged, never sent), packs the integers
   (BatchCrypt packing, :class:`veil.crypto.encoding.Packing`, with headroom for n
   summands) and encrypts them under the threshold key with its noise pool. It sends
   **only the ciphertexts**.
2. The aggregator multiplies the ciphertexts of the parties that answered: ``Enc(sum_i r_i)``.
3. **decrypt** -- it sends the n signed answers to ``threshold`` parties chosen at random; each
   checks them, multiplies them itself and returns its partial decryption with its proof
   of correctness (:mod:`veil.crypto.threshold`, root decryption: about 7x faster than
   Damgard-Jurik's; the aggregator also learns a power of the aggregate's noise, which
   reveals nothing beyond the sum because the aggregate multiplies fresh encryptions with
   independent noise -- the argument is in that module's docstring).
4. Each proof is verified on arrival: a wrong partial decryption is rejected, its party
   named and excluded. When the stage closes with fewer than ``threshold`` valid partials
   (dropouts, bad proofs) the aggregator asks as many other live parties as are missing,
   until ``threshold`` are in; when no live party is left it aborts the round
   (:class:`~veil.errors.ProtocolError`: fewer than threshold parties alive). It combines the
   partials, unpacks, and obtains ``sum_i Q_s(D_i) + sum_i noise_i``, the only plaintext
   it ever sees.

A party whose answer is not a ciphertext array under the session key, or has the wrong
number of ciphertexts, is rejected (and excluded from the round). The same classes run
the baselines in the clear (``encrypted=False``: plain aggregation, local DP, central DP
with the aggregator adding the noise), so that time and bytes compare like for like.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from veil._validation import check_choice, check_delta, check_int, check_positive
from veil.crypto import serialization, threshold
from veil.crypto.dkg import distributed_keygen
from veil.crypto.encoding import Packing
from veil.crypto.identity import make_identities, public_identity, sign, verify
from veil.crypto.paillier import EncryptedArray, NoisePool
from veil.dp import Ledger
from veil.dp.distributed import NOISES, DistributedMechanism
from veil.dp.ledger import Block
from veil.dp.trust import Trust, check_trust
from veil.errors import ConfigError, CryptoError, DataError, ProtocolError
from veil.fl.hybrid.fit import METHODS
from veil.fl.hybrid.grid import contribute, decode, noise_std, query_noise, value_limit
from veil.fl.messages import Message, encode
from veil.fl.party_ledger import ledger_from_state, ledger_state
from veil.fl.protocol import PROTOCOL_STAGES, ClientProtocol, RoundResult, ServerRound
from veil.learn.queries import Query, QueryAnswer, QueryLearner, QueryShape
from veil.random import Generator, RngLike, check_rng, noise_rng, secure_rng

__all__ = ["Agreement", "HybridKeys", "deal_keys", "HybridServer", "HybridClient",
           "QueryEncoding", "make_identities", "next_run", "run_id"]

log = logging.getLogger(__name__)

#: bytes of a party's nonce for the run id
NONCE = 32


# -- set-up ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Agreement:
    """What all parties agree on at set-up (public; see the module docstring).

    ``method``: one of :data:`veil.fl.hybrid.fit.METHODS`; it decides whether answers are
    encrypted and who adds the noise. ``trust``: the parties'
    :class:`~veil.dp.trust.Trust` (honest = t; for ``smc`` it only sets the decryption
    threshold; default t = ceil(n/2)). ``noise`` / ``noise_multiplier`` / ``delta``: the noise
    (ignored for ``none`` and ``smc``). ``packed``: many values per ciphertext (False: one
    per ciphertext, for comparison). ``min_answers``: fewest answers a round proceeds with
    (default n; the encrypted methods allow only n, see the module docstring).
    """

    parties: int
    method: str = "hybrid"
    trust: Trust | None = None
    noise: str = "skellam"
    noise_multiplier: float | None = None
    delta: float = 1e-6
    packed: bool = True
    min_answers: int | None = None
    identities: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        n = check_int(self.parties, "parties", low=1)
        check_choice(self.method, "method", tuple(METHODS))
        check_choice(self.noise, "noise", tuple(NOISES))
        if self.trust is not None:
            check_trust(self.trust, n)
        if self.method == "hybrid" and self.trust is None:
            raise ConfigError(f"trust=None is not allowed with method='hybrid': give "
                              f"Trust({n}, honest), honest in 1..{n}")
        object.__setattr__(self, "_mechanisms", {})   # shape -> mechanism (mechanism())
        if METHODS[self.method].noise is not None:
            if self.noise_multiplier is None:
                raise ConfigError(f"noise_multiplier=None is not allowed with method="
                                  f"{self.method!r}: calibrate it for the plan and budget")
            check_positive(self.noise_multiplier, "noise_multiplier")
        check_delta(self.delta)
        if self.min_answers is not None:
            check_int(self.min_answers, "min_answers", low=1, high=n)
            if self.encrypted and self.min_answers < n:
                # a quorum below n lets the aggregator have two groups decrypt two sums (their
                # difference is one answer with its own noise) or drop honest answers down to
                # the quorum (fewer honest noise shares than charged): refused
                raise ConfigError(f"min_answers={self.min_answers!r} is not allowed with "
                                  f"method={self.method!r}: an encrypted sum needs every "
                                  f"party's answer (min_answers={n} or None)")
        if self.identities and (len(self.identities) != n or not all(
                isinstance(k, bytes) and len(k) == 32 for k in self.identities)):
            raise ConfigError(f"identities has {len(self.identities)} entries; expected one "
                              f"32-byte Ed25519 public key per party ({n})")

    def digest(self, public_key: threshold.ThresholdPublicKey) -> bytes:
        """SHA-256 of this agreement and the session key: what a run id starts from."""
        body = [self.parties, self.method, self.trusted.honest, self.noise,
                float(self.noise_multiplier or 0.0), float(self.delta), self.packed,
                list(self.identities), public_key.fingerprint]
        return hashlib.sha256(b"veil.hybrid.agreement|" + encode(body)).digest()

    @property
    def encrypted(self) -> bool:
        return METHODS[self.method].encrypted

    @property
    def trusted(self) -> Trust:
        """The parties' trust (honest = ceil(n/2) for ``smc`` when not given)."""
        return self.trust if self.trust is not None else \
            Trust(self.parties, math.ceil(self.parties / 2))

    @property
    def threshold(self) -> int:
        """n - t + 1: partial decryptions needed."""
        return self.trusted.threshold

    @property
    def party_noise(self) -> bool:
        return METHODS[self.method].noise == "parties"

    def mechanism(self, shape: QueryShape) -> DistributedMechanism | None:
        """The query's noise: each party's share mechanism, or central DP's (the aggregator
        draws it once); None without noise. It also fixes the query's integer grid. Built
        once per query shape (every round of a model asks the same shape) and kept."""
        if METHODS[self.method].noise is None:
            return None
        cache: dict[QueryShape, DistributedMechanism] = self._mechanisms  # type: ignore
        if shape not in cache:
            cache[shape] = query_noise(self.noise, self.noise_multiplier, shape,
                                       trust=METHODS[self.method].noise_parties(
                                           self.trust, self.parties), delta=self.delta)
        return cache[shape]


def run_id(agreement_digest: bytes, nonces: dict[int, bytes]) -> bytes:
    """The run id: SHA-256 of the agreement (:meth:`Agreement.digest`) and of every party's
    fresh nonce of the run's set-up (``join``), in party order."""
    return hashlib.sha256(b"veil.hybrid.run|" + agreement_digest + b"".join(
        nonces[i] for i in sorted(nonces))).digest()


def _query_digest(query: Query) -> bytes:
    """SHA-256 of the whole query as sent: its name, shape and spec (for a gradient query,
    the model parameters it is asked at)."""
    return hashlib.sha256(encode(_query_body(query))).digest()


def _statement(run: bytes, round: int, query: Query, party: int, blob: bytes) -> bytes:
    """What a party signs: its answer's ciphertexts to this round's query, in this run."""
    return b"veil.hybrid.answer|" + run + encode([round, party]) + _query_digest(query) + \
        hashlib.sha256(blob).digest()


@dataclass(frozen=True)
class HybridKeys:
    """The dealer's output: the threshold public key and party i's share at ``shares[i]``."""

    public_key: threshold.ThresholdPublicKey
    shares: tuple[threshold.KeyShare, ...]


def deal_keys(trust: Trust, *, bits: int = 2048, primes: Any = None,
              insecure_ok: bool = False, keygen: str = "dealer",
              rng: RngLike = None) -> HybridKeys:
    """A threshold Paillier key for ``trust.parties`` parties with threshold
    ``trust.threshold = n - t + 1``, and one key share per party. ``keygen="dealer"``: the
    trusted dealer (:func:`veil.crypto.threshold.keygen`;
    ``primes``: pre-generated safe primes); ``"distributed"``: the parties generate it
    together and nobody ever knows the factorization (:func:`veil.crypto.dkg.
    distributed_keygen`, honest majority during key generation; all parties simulated in
    this process). ``insecure_ok`` for test keys under 2048 bits."""
    trust = check_trust(trust)
    check_choice(keygen, "keygen", ("dealer", "distributed"))
    n, need = trust.parties, trust.threshold
    if keygen == "distributed":
        pk, shares = distributed_keygen(bits, n, need, insecure_ok=insecure_ok, rng=rng)
    else:
        pk, shares = threshold.keygen(bits, n, need, insecure_ok=insecure_ok,
                                      primes=primes, rng=rng)
    return HybridKeys(pk, tuple(shares))


class QueryEncoding:
    """How one query's integers become plaintexts: packed with headroom for n summands, or
    one per plaintext. Every party's integers lie in ``[-limit, limit]``
    (:func:`veil.fl.hybrid.grid.value_limit`), so the sum of n of them never overflows."""

    def __init__(self, shape: QueryShape, agreement: Agreement, key_bits: int) -> None:
        self.shape = shape
        self.mechanism = agreement.mechanism(shape)
        self.limit = value_limit(shape, self.mechanism, noisy=agreement.party_noise)
        self.value_bits = self.limit.bit_length() + 1
        self.parties = agreement.parties
        self.packing = None
        if agreement.packed:
            if self.value_bits > 56:
                raise ConfigError(f"query {shape!r} needs {self.value_bits}-bit values: lower "
                                  "its bound (e.g. the learner's max_records)")
            self.packing = Packing(self.value_bits, agreement.parties, key_bits=key_bits)

    @property
    def ciphertexts(self) -> int:
        """Number of ciphertexts per party."""
        if self.packing is None:
            return self.shape.size
        return self.packing.plaintexts_needed(self.shape.size)

    def plaintexts(self, ints: np.ndarray) -> np.ndarray:
        return self.packing.pack(ints) if self.packing is not None else ints.astype(object)

    def values(self, plaintexts: Any) -> np.ndarray:
        """The summed integers from the decrypted plaintexts (overflow is a CryptoError)."""
        if self.packing is not None:
            return self.packing.unpack(plaintexts, self.shape.size).astype(object)
        values = np.asarray(plaintexts, dtype=object).ravel()
        cap = self.parties * self.limit
        if any(abs(int(v)) > cap for v in values.tolist()):
            raise CryptoError(f"a decrypted sum exceeds {cap}: more than {self.parties} "
                              "summands or out-of-range inputs")
        return values


def _query_body(query: Query) -> dict[str, Any]:
    s = query.shape
    return {"name": query.name, "spec": dict(query.spec),
            "shape": {"size": s.size, "l1": float(s.l1), "l2": float(s.l2),
                      "bound": float(s.bound), "integer": s.integer, "frac_bits": s.frac_bits}}


def _read_query(msg: Message) -> Query:
    shape = msg.get("shape", dict)
    try:
        parsed = QueryShape(**shape)
    except (TypeError, ConfigError) as exc:
        raise ProtocolError(f"{msg.origin}: malformed query shape: {exc}") from None
    return Query(msg.get("name", str), parsed, msg.get("spec", dict))


def _verify(agreement: Agreement, party: int, signature: bytes, statement: bytes) -> None:
    """ProtocolError unless ``signature`` is party's Ed25519 signature of ``statement``."""
    public = agreement.identities[party] if 0 <= party < len(agreement.identities) else None
    if not verify(public, signature, statement):
        raise ProtocolError(f"party {party}'s answer does not carry its valid signature: "
                            "rejected")


def _load(msg: Message, field: str, kind: type, public_key: Any) -> Any:
    """A serialized crypto object under the session key (ProtocolError otherwise)."""
    try:
        obj = serialization.loads(msg.blob(field), public_key=public_key)
    except CryptoError as exc:
        raise ProtocolError(f"{msg.origin}, round {msg.round}: field {field!r} is rejected: "
                            f"{exc}") from None
    if not isinstance(obj, kind):
        raise ProtocolError(f"{msg.origin}, round {msg.round}: field {field!r} holds a "
                            f"{type(obj).__name__}; expected a {kind.__name__}")
    return obj


# -- the aggregator --------------------------------------------------------------------------
class HybridServer(ServerRound):
    """The aggregator's side of one query (module docstring).

    ``finish(answer)``: turns the decoded :class:`~veil.learn.queries.QueryAnswer` into the
    round's parameters (default: the noisy sum itself). ``rng`` picks the decrypting parties
    and draws central DP's noise (``method="central"``).
    """

    protocol = "hybrid"
    stages = PROTOCOL_STAGES["hybrid"]

    def __init__(self, server_round: int, clients: Sequence[int], query: Query,
                 agreement: Agreement, public_key: threshold.ThresholdPublicKey | None = None, *,
                 finish: Callable[[QueryAnswer], np.ndarray] | None = None,
                 run: bytes | None = None, rng: RngLike = None) -> None:
        """``run``: the run id of an earlier round of this run (None: this round opens with
        the run's set-up, ``join``; :attr:`run_id` holds the id once it is agreed)."""
        super().__init__(server_round, clients)
        if agreement.encrypted and not isinstance(public_key, threshold.ThresholdPublicKey):
            raise ConfigError(f"method={agreement.method!r} encrypts: give the threshold "
                              "public key from deal_keys")
        if agreement.encrypted and (public_key.parties != agreement.parties or
                                    public_key.threshold != agreement.threshold):
            raise ConfigError(f"the key is {public_key.threshold}-of-{public_key.parties}; "
                              f"the agreement needs {agreement.threshold}-of-"
                              f"{agreement.parties} (threshold = n - t + 1)")
        self.query = query
        self.agreement = agreement
        self.public_key = public_key
        self.encoding = QueryEncoding(query.shape, agreement,
                                      public_key.bits if public_key is not None else 2048)
        self.finish = finish
        self.rng = check_rng(rng)
        self.run_id = run
        if run is not None or not agreement.encrypted:
            self.stages = ("answer", "decrypt")  # type: ignore[misc]
        self.answered: list[int] = []
        self.total: EncryptedArray | None = None
        self.partials: dict[int, threshold.PartialDecryption] = {}
        self.asked: set[int] = set()
        self.answer: QueryAnswer | None = None

    def _begin(self) -> list[Message]:
        if self.stage == "join":
            return [self.request(c) for c in self.clients]
        body = _query_body(self.query)
        return [self.request(c, **body) for c in self.clients]

    def _joined(self, nonces: dict[int, bytes]) -> list[Message]:
        """The run id from every party's nonce; the query, with the nonces, to each."""
        if len(nonces) < self.agreement.parties:
            raise ProtocolError(f"round {self.round} aborted: {len(nonces)} of "
                                f"{self.agreement.parties} parties joined the run; its id "
                                "needs every party's fresh nonce")
        self.run_id = run_id(self.agreement.digest(self.public_key), nonces)
        body = _query_body(self.query)
        return [self.request(c, nonces=dict(nonces), **body) for c in self.clients]

    def _check(self, msg: Message) -> Any:
        if self.stage == "join":
            return msg.blob("nonce", size=NONCE)
        if self.stage == "answer":
            if not self.agreement.encrypted:
                values = msg.array("values", dtype=np.int64, shape=(self.query.shape.size,))
                if values.size and int(np.max(np.abs(values))) > self.encoding.limit:
                    raise ProtocolError(f"{msg.origin}: values beyond the agreed limit "
                                        f"{self.encoding.limit}: rejected")
                return values
            ct = _load(msg, "ciphertexts", EncryptedArray, self.public_key)
            if ct.shape != (self.encoding.ciphertexts,):
                raise ProtocolError(f"{msg.origin}: {ct.shape} ciphertexts; the query needs "
                                    f"({self.encoding.ciphertexts},): rejected")
            blob, signature = msg.blob("ciphertexts"), msg.blob("signature", size=64)
            _verify(self.agreement, msg.sender, signature,
                    _statement(self.run_id, self.round, self.query, msg.sender, blob))
            return ct, blob, signature
        partial = _load(msg, "partial", threshold.PartialDecryption, self.public_key)
        if partial.party != msg.sender + 1:
            raise ProtocolError(f"{msg.origin}: sent the partial decryption of key share "
                                f"{partial.party}, not its own ({msg.sender + 1}): rejected")
        return partial

    def _advance(self, stage: str, answers: dict[int, Any]) -> list[Message]:
        if stage == "join":
            return self._joined(answers)
        if stage == "answer":
            return self._summed(answers)
        self.partials.update(answers)
        while len(self.partials) >= self.agreement.threshold:
            used = [self.partials[c] for c in sorted(self.partials)][:self.agreement.threshold]
            try:   # verifies every proof; only when one fails is each checked on its own
                plaintexts = self.public_key.combine(used, ciphertext=self.total)
            except CryptoError as exc:
                self._drop_wrong(used, exc)
                continue
            return self._finished(self.encoding.values(plaintexts))
        need = self.agreement.threshold - len(self.partials)
        candidates = [c for c in self.answered if c not in self.asked]
        if len(candidates) < need:
            raise ProtocolError(
                f"round {self.round} aborted: {len(self.partials)} valid partial "
                f"decryption(s) and {len(candidates)} live party(ies) not yet asked: fewer "
                f"than threshold = {self.agreement.threshold} parties alive")
        self.repeat_stage()
        return self._ask(candidates, need)

    def _summed(self, answers: dict[int, Any]) -> list[Message]:
        need = self.agreement.min_answers or len(self.clients)
        if len(answers) < need:
            raise ProtocolError(f"round {self.round} aborted: {len(answers)} of "
                                f"{len(self.clients)} parties answered; {need} needed (the "
                                "noise of t honest parties must be in the sum)")
        self.answered = sorted(answers)
        if not self.agreement.encrypted:
            total = np.zeros(self.query.shape.size, dtype=object)
            for values in answers.values():
                total += values.astype(object)
            mech = self.encoding.mechanism
            if mech is not None and not self.agreement.party_noise:   # central DP
                noise, _ = contribute(self.query.shape, np.zeros(self.query.shape.size), mech,
                                      noise_rng(self.rng))
                total += noise.astype(object)
            return self._finished(total)
        self.signed = {c: [answers[c][1], answers[c][2]] for c in self.answered}
        cts = [answers[c][0] for c in self.answered]
        total = cts[0]
        for ct in cts[1:]:
            total = total + ct        # multiplies the ciphertexts: Enc(sum of plaintexts)
        self.total = total
        if len(self.answered) < self.agreement.threshold:
            raise ProtocolError(f"round {self.round} aborted: {len(self.answered)} parties "
                                f"alive, fewer than threshold = {self.agreement.threshold}")
        return self._ask(self.answered, self.agreement.threshold)

    def _ask(self, candidates: Sequence[int], count: int) -> list[Message]:
        order = self.rng.permutation(len(candidates))[:count]
        chosen = sorted(candidates[i] for i in order.tolist())
        self.asked.update(chosen)
        return [self.request(c, answers=self.signed) for c in chosen]

    def _drop_wrong(self, used: list[threshold.PartialDecryption], error: Exception) -> None:
        """Find the partial decryptions whose proofs fail, name and exclude their parties."""
        wrong = []
        for p in used:
            try:
                self.public_key.verify(p, self.total)
            except CryptoError as exc:
                wrong.append(p.party - 1)
                reason = (f"wrong partial decryption, caught by its proof ({exc}); another "
                          "live party is asked instead")
                log.warning("round %d: client %d excluded: %s", self.round, p.party - 1, reason)
                self._exclude(p.party - 1, reason)
                del self.partials[p.party - 1]
        if not wrong:
            raise ProtocolError(f"round {self.round}: decryption failed: {error}")

    def _finished(self, total: np.ndarray) -> list[Message]:
        mech = self.encoding.mechanism
        copies = len(self.answered) if self.agreement.party_noise else 1
        self.answer = QueryAnswer(decode(total, self.query.shape, mech),
                                  noise_std(self.query.shape, mech, copies), 0,
                                  tuple(self.answered))
        params = self.answer.values if self.finish is None else self.finish(self.answer)
        self.result = RoundResult(params, tuple(self.answered), {
            "answered": float(len(self.answered)),
            "decryptions": float(len(self.partials)),
            "excluded": float(len(self.excluded))})
        return []


def next_run(server: HybridServer | None) -> bytes | None:
    """The run id the next round goes on with: the previous round's once that round
    completed (at the start, or after an aborted round, the parties join a run again)."""
    return server.run_id if server is not None and server.done else None


# -- a party ----------------------------------------------------------------------------------
class HybridClient(ClientProtocol):
    """Party ``client_id`` (its key share is number ``client_id + 1``): answers queries from
    its own ``(X, y)`` with ``learner.answer`` and helps decrypt the aggregate.

    ``pool``: a :class:`~veil.crypto.paillier.NoisePool` for the session key (one is made
    when None); fill it ahead of the rounds (:meth:`precompute`) to encrypt online with one
    multiplication per ciphertext. A party shipped to a runtime's worker process keeps
    its key share there, and builds its fixed-base tables and fills its pool there (a
    pickled pool arrives empty: no noise value is ever in two processes), so fill it where
    it lives: ``runtime.call(clients, HybridClient.precompute, count)``. ``clipped`` /
    ``records_clipped`` count, over all rounds, the values this party clipped into a
    query's bound (or its noise's tail) and the records whose contribution was clipped;
    they stay with the party (and are logged).
    """

    protocol = "hybrid"
    stages = PROTOCOL_STAGES["hybrid"]
    opens = ("answer",)   # later rounds of a run, and the clear methods, skip the join

    def __init__(self, client_id: int, X: Any, y: Any, agreement: Agreement, *,
                 learner: QueryLearner | None = None,
                 key_share: threshold.KeyShare | None = None,
                 identity: bytes | None = None, ledger: Ledger | None = None,
                 pool: NoisePool | None = None) -> None:
        super().__init__(client_id)
        self.X, self.y = np.asarray(X), np.asarray(y)
        if self.X.ndim != 2 or self.y.shape != (self.X.shape[0],):
            raise DataError(f"party {client_id}: X has shape {self.X.shape} and y "
                            f"{self.y.shape}; expected (n, d) and (n,)")
        self.agreement = agreement
        self.learner = learner
        if agreement.encrypted:
            if not isinstance(key_share, threshold.KeyShare) or \
                    key_share.index != client_id + 1:
                raise ConfigError(f"party {client_id} needs its own key share (index "
                                  f"{client_id + 1}) to take part in an encrypted protocol")
            if len(agreement.identities) != agreement.parties or not isinstance(
                    identity, bytes) or len(identity) != 32 or \
                    public_identity(identity) != agreement.identities[client_id]:
                raise ConfigError(f"party {client_id} needs its own identity key, whose "
                                  "public key is in agreement.identities (make_identities)")
        self.key_share = key_share
        self._identity = identity
        self.ledger = ledger
        self.pool = pool if pool is not None or key_share is None else \
            NoisePool(key_share.public_key, capacity=1)
        self.clipped = 0
        self.records_clipped = 0
        self.answered = 0
        self._current: tuple[int, Query, QueryEncoding] | None = None
        self.run_id: bytes | None = None      # the run this party joined (encrypted methods)
        self._nonce: bytes | None = None      # its nonce of this round's join
        self._block: Block | None | bool = None  # the planned queries on its ledger

    def __getstate__(self) -> dict[str, Any]:
        # A party shipped to a worker process takes its budget along: a Ledger never pickles
        # (a copy could be spent twice), so an unspent in-memory one travels as its budget
        # and is rebuilt there, where it is then the party's only ledger. A persisted one
        # travels as its file name and is reopened there: the file stays its one record
        # (several processes may share it, veil.dp.ledger), so this works on the party's
        # own machine only (a Flower node keeps its party between messages this way), with
        # its planned block (veil.fl.party_ledger.ledger_state).
        state = self.__dict__.copy()
        state["ledger"] = ledger_state(self.ledger, self._block, f"party {self.client_id}")
        del state["_block"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.ledger, self._block = ledger_from_state(state["ledger"])

    def _charge(self, event: Any, plan: list[Any], query: Query, bits: int) -> None:
        """Charge ``query`` to this party's ledger. At the first query the longest prefix
        of the planned queries (fixed by the agreement) that fits is reserved as one block
        (:meth:`veil.dp.Ledger.longest_plan`, at the agreement's delta) unless the noise is
        pure; a query that is not the plan's next step is charged on its own, or refused
        (BudgetExceededError)."""
        if self._block is None:  # pure (Laplace) queries are added exactly one by one
            planned = [QueryEncoding(dataclasses.replace(p, size=query.shape.size),
                                     self.agreement, bits).mechanism.event for p in plan]
            self._block = self.agreement.noise != "laplace" and self.ledger.longest_plan(
                planned, delta=self.agreement.delta,
                label=f"party {self.client_id}: planned queries") or False
        if self._block and self._block.fits(event):
            self._block.charge(event, label=f"query {query.name}")
        else:
            self.ledger.charge(event, label=f"query {query.name}")

    def precompute(self, count: int) -> None:
        """Fill the noise pool with ``count`` more encryption noises (offline work)."""
        if self.pool is not None:
            self.pool.fill(check_int(count, "count", low=0))

    def _on_join(self, msg: Message, rng: Generator) -> list[Message]:
        """A new run: a fresh nonce (CSPRNG, whatever the seed) for its id; the old id is
        forgotten, so nothing signed in another run is accepted again."""
        if not self.agreement.encrypted:
            raise ProtocolError(f"party {self.client_id}: method {self.agreement.method!r} "
                                "has no run set-up: refused")
        self.run_id, self._nonce = None, secure_rng().bytes(NONCE)
        return [self.reply(msg, nonce=self._nonce)]

    def _run(self, msg: Message) -> bytes:
        """This round's run id: agreed now from the nonces sent with the query (the round
        opened with ``join``: every party's, this party's own unchanged), or the one agreed
        earlier in this run (ProtocolError otherwise)."""
        if "nonces" not in msg.body:
            if self.run_id is None:
                raise ProtocolError(f"party {self.client_id}: asked to answer in round "
                                    f"{msg.round} without having joined a run: refused")
            return self.run_id
        parties = set(range(self.agreement.parties))
        nonces = msg.table("nonces", allowed=parties)
        if self._stage != 0 or self._nonce is None or \
                nonces.get(self.client_id) != self._nonce or set(nonces) != parties or \
                any(len(v) != NONCE for v in nonces.values()):
            raise msg.error("nonces", f"is not one {NONCE}-byte nonce per party with party "
                                      f"{self.client_id}'s own of this round's join")
        self._nonce = None
        self.run_id = run_id(self.agreement.digest(self.key_share.public_key), nonces)
        return self.run_id

    def _on_answer(self, msg: Message, rng: Generator) -> list[Message]:
        if self.learner is None:
            raise ProtocolError(f"party {self.client_id} has no learner to answer queries")
        query = _read_query(msg)
        run = self._run(msg) if self.agreement.encrypted else b""
        plan = self.learner.plan()
        # the noise depends on the sensitivities and bounds, not on the size (a plan may
        # leave it 0 where it depends on the data seen so far)
        if not any(dataclasses.replace(p, size=query.shape.size) == query.shape for p in plan):
            raise ProtocolError(f"party {self.client_id}: query {query.name!r} has shape "
                                f"{query.shape!r}, which is not in this party's plan: refused")
        if self.answered >= len(plan):
            raise ProtocolError(f"party {self.client_id}: {self.answered} queries answered, "
                                f"all that its plan has: refused")
        bits = self.key_share.public_key.bits if self.key_share else 2048
        encoding = QueryEncoding(query.shape, self.agreement, bits)
        if self.ledger is not None and encoding.mechanism is not None:
            self._charge(encoding.mechanism.event, plan, query, bits)
        self.answered += 1
        answer, records = self.learner.answer(query, self.X, self.y)
        ints, over = contribute(query.shape, answer, encoding.mechanism, noise_rng(rng),
                                noisy=self.agreement.party_noise)
        self.records_clipped += records
        if over:
            self.clipped += over
            log.warning("party %d clipped %d value(s) of query %r into its bound",
                        self.client_id, over, query.name)
        if not self.agreement.encrypted:
            return [self.reply(msg, values=ints)]
        pk = self.key_share.public_key
        blob = serialization.dumps(pk.encrypt(encoding.plaintexts(ints), pool=self.pool))
        self._current = (msg.round, query, encoding)
        signature = sign(self._identity, _statement(run, msg.round, query, self.client_id,
                                                    blob))
        return [self.reply(msg, ciphertexts=blob, signature=signature)]

    def _on_decrypt(self, msg: Message, rng: Generator) -> list[Message]:
        """Partially decrypt the product of the signed answers (module docstring)."""
        # root decryption where the key has root shares (a dealt key), else Damgard-Jurik
        method = "root" if self.key_share.public_key.root_keys else "dj"
        partial = self.key_share.partial_decrypt(self._aggregate(msg), method=method)
        return [self.reply(msg, partial=serialization.dumps(partial))]

    def _aggregate(self, msg: Message) -> EncryptedArray:
        """The product of the signed answers in a decrypt request, once they are all checked
        (ProtocolError naming what is wrong otherwise). The stage machine serves one decrypt
        request per round (:meth:`veil.fl.protocol.ClientProtocol.handle`)."""
        if self._current is None or self._current[0] != msg.round:
            raise ProtocolError(f"party {self.client_id}: asked to decrypt in round "
                                f"{msg.round} without having answered its query: refused")
        _, query, encoding = self._current
        pk = self.key_share.public_key
        signed = msg.table("answers", allowed=set(range(self.agreement.parties)), value=list)
        if len(signed) != self.agreement.parties:
            raise ProtocolError(f"party {self.client_id}: {len(signed)} signed answers; all "
                                f"{self.agreement.parties} must be summed: refused")
        total = None
        for party, pair in sorted(signed.items()):
            if len(pair) != 2 or not all(isinstance(x, bytes) for x in pair):
                raise msg.error("answers", f"entry of party {party} is not [ciphertexts, "
                                           "signature]")
            blob, signature = pair
            _verify(self.agreement, party, signature,
                    _statement(self.run_id, msg.round, query, party, blob))
            ct = _load(Message(msg.protocol, msg.round, msg.stage, msg.sender, msg.recipient,
                               {"answer": blob}), "answer", EncryptedArray, pk)
            if ct.shape != (encoding.ciphertexts,):
                raise ProtocolError(f"party {self.client_id}: party {party}'s answer has "
                                    f"{ct.shape} ciphertexts; the query needs "
                                    f"({encoding.ciphertexts},): refused")
            total = ct if total is None else total + ct
        return total
