"""Threshold Paillier keys without a trusted dealer: n parties generate N = p q together.

Nobody ever holds p, q or phi(N) = (p - 1)(q - 1): each party i keeps additive shares
p_i, q_i (p = sum_i p_i, q = sum_i q_i), the parties open N = p q, test that it is a
product of two primes, and derive Shoup / Damgard-Jurik key shares of a decryption
exponent D (D = 0 mod phi(N), D = 1 mod N) that :mod:`veil.crypto.threshold` uses
unchanged: partial decryptions, their proofs and ``combine``.

Threat model
    Honest-but-curious parties with an honest majority during key generation: any
    coalition of at most tau = floor((n - 1) / 2) parties learns nothing about p, q or
    phi(N) beyond N itself (statistically, 2^-128, apart from the Boneh-Franklin values
    discussed below). The decryption key afterwards is ``threshold``-of-n, so the whole
    scheme tolerates min(tau, threshold - 1) curious parties; n >= 3. Channels are private
    and authenticated (the runtime's job: TLS). Every message is checked (framing,
    session, round, sender, lengths, ranges); a malformed message, a share that does not
    match its sender's commitments, or a wrong partial decryption in the final key
    confirmation aborts with :class:`KeygenAbort` naming the party; a party that stops
    sending aborts everyone cleanly (the runner names it). On abort every party drops its
    secrets: no partial key is left behind. Active attacks beyond these checks (a party
    that sends well-formed but wrong values in the sieve) are detected by the final key
    confirmation (a test decryption with known plaintext) without a culprit.

Blame
    A party names another only where what it holds proves the other at fault. Each message
    carries a digest of everything its sender saw opened or broadcast so far (the sieve
    opening, the moduli, the biprimality products, gamma, d, the Feldman commitments), and
    a round's messages are read only once every sender's digest equals the receiver's: a
    party that sent different (or false) openings to different parties makes the views
    differ, and the parties abort with ``party`` None ("saw different values"), naming
    nobody -- the honest party whose view was corrupted would otherwise name the first
    honest sender whose message no longer fits. With equal views, an honest sender's
    message always passes every check, so a failing one is its sender's own fault, seen
    first-hand on an authenticated link (TLS signs nothing a party could show the
    others: the runtime never forwards such blame, :mod:`veil.net.mesh`).

Biprimality under a deviating party (issue 29, item 11)
    Can a party that waits for the others' biprimality values make the test pass for a
    modulus that is not a product of two primes? Each g^(phi_i / 4) travels in the same
    round to everyone; a party that sends last can choose its own value as
    ``+-1 / prod_{j != i} g^(phi_j / 4)`` and so make every product +-1, for any N. So
    the test by itself holds only against honest-but-curious parties (the threat model
    above), not against a rushing malicious one. What backs the key then is step 6: a
    public test ciphertext c = (1 + m N) r^N mod N^2, r from a public coin (no party
    picks it), must decrypt to m under the parties' proven partial decryptions, which
    needs r^(N D) = 1 (mod N^2): for N with a third prime factor, D = Delta phi' B built
    from the wrong phi' = N + 1 - p - q kills r's order only by chance. That is one random
    check, evidence without a stated error bound, not a proof that N is biprime. Against
    malicious parties the key is therefore not certified biprime; a deployment that needs
    that must add a zero-knowledge proof of biprimality over committed shares (as in
    the maliciously secure protocols that followed Boneh-Franklin), which this module
    does not implement.

The protocol (all arithmetic with gmpy2; every random value from :mod:`veil.random`)
    Secure arithmetic: BGW (Ben-Or, Goldwasser & Wigderson, STOC 1988) with Shamir shares
    of degree tau over a public ring Z_P (P = 2^k + c, the least such c with no prime
    factor of P up to n: every Lagrange denominator j - i is then invertible, which is all
    Shamir sharing with the points 1..n needs; no prime is searched for, so the
    parameters cost nothing to set up): sums are local, a product of two shared
    values is a local product (degree 2 tau <= n - 1, so it can be opened by everyone),
    and a product that is used again is re-shared at degree tau (Gennaro, Rabin & Rabin,
    PODC 1998). Before a product is opened the parties add a random degree-2 tau sharing
    of zero (dealt in the round before): without it the opened shares determine the
    polynomial p(X) q(X), and factoring that polynomial over Z_P would hand p to any
    party that knows its own share p(i) (Boneh & Franklin randomize the same way).
    A shared integer x < X is opened *masked* as x + rho, with rho = sum_i
    rho_i, rho_i uniform in [0, 2^128 X): the opening is 2^-128-close to uniform, and
    (x + rho - rho_1, -rho_2, ..., -rho_n) are additive integer shares of x.

    1. Distributed sieving (Malkin, Wu & Boneh, NDSS 1999): with M the product of the
       small odd primes up to a bound, the first tau + 1 parties draw units a_i of Z_M^*,
       the parties compute the product A = prod a_i with BGW in Z_{P_A}, P_A >
       2^129 n M^(tau+1), open it masked and reduce the additive shares mod M: b_i with
       sum_i b_i = A (mod M). Then p_i = CRT(b_i mod M, 3 or 0 mod 4) + 4 M r_i (plus a
       public offset 3 * 2^(h-2) rounded to a multiple of 4M for party 1) with r_i
       random: p = sum p_i is a unit mod M (no prime factor up to the bound) and p = 3
       (mod 4), with p_1 = 3 and p_i = 0 (mod 4) for i > 1 as the biprimality test
       needs, and 3 * 2^(h-2) <= p < 2^h so N has exactly 2h bits. Same for q. M has
       256 bits at 2048-bit keys (primes up to 193): about a fifth of all odd numbers
       survive, so ~22x fewer moduli are formed than with unsieved candidates (TNO's
       package tests small factors only after N is open).
    2. N = p q by one BGW multiplication over Z_{P_N} (P_N > 2^bits), opened by all.
       Public trial division of N by the primes from the sieve bound to 2^16 (N has a
       small factor iff p or q has): rejected candidates cost nothing more.
    3. Biprimality (Boneh & Franklin, CRYPTO 1997 / J. ACM 2001, section 3): for public
       random g with Jacobi symbol (g / N) = 1 (derived by SHAKE-256 from the session and
       N, so no party chooses them) party 1 sends g^((N + 1 - p_1 - q_1) / 4) and party i
       > 1 sends g^(-(p_i + q_i) / 4) mod N; their product g^(phi / 4) must be +-1. A
       modulus that is not a product of two distinct primes passes one g with
       probability <= 1/2 (given gcd(N, p + q - 1) = 1, checked in step 4), so
       ``stat_bits`` (>= 40) values of g bound a false accept by 2^-stat_bits. Candidates
       are tested in batches: one g for every candidate, then the remaining g's for the
       few that passed. As in Boneh-Franklin, the parties see g^(phi_i / 4) of the
       accepted modulus (phi_i their additive shares of phi), which they argue reveals
       nothing useful.
    4. Decryption exponent (in the style of Nishide & Sakurai, WISA 2010): with phi =
       N + 1 - sum_i (p_i + q_i) re-shared over Z_P (P > 2^129 (n^2 + n) N^2), the parties
       open gamma = phi R + N S (R = sum r_i, r_i < N; S masks: statistically hiding) and
       take gamma mod N = phi R mod N; gcd(gamma, N) = 1 (else the candidate is dropped:
       this is Boneh-Franklin's gcd(N, p + q - 1) test as well). Then b_i = r_i (Delta
       gamma)^-1 mod N, B = sum b_i, and D = Delta phi B satisfies D = 0 (mod phi) and
       D = Delta phi R (Delta gamma)^-1 = 1 (mod N) with Delta = n!. One more BGW product
       opened masked gives additive integer shares d_i of d = phi B.
    5. Threshold shares: Shamir over the integers (Rabin, CRYPTO 1998; Damgard &
       Koprowski, EUROCRYPT 2001): party j sends party i f_j(i) with f_j(X) = Delta d_j +
       sum_{k<t} a_jk X^k, a_jk uniform in [0, 2^(128 + n) Delta d_max); s_i = sum_j
       f_j(i) is a share of f(0) = D. The secret is a multiple of Delta, so any t - 1
       shares are 2^-128-close to shares of any other secret, and combine's Lagrange
       multipliers mu_i = L lambda_i give sum mu_i s_i = L D exactly. Party j publishes
       Feldman commitments C_jk = v^(a_jk) in Z_{N^2}^* (v a public random square):
       party i checks v^(f_j(i)) = prod_k C_jk^(i^k) (naming j otherwise) and everyone
       computes the verification keys v_i = (prod_jk C_jk^(i^k))^Delta = v^(Delta s_i).
       Shares exceed N^2 (``share_bits`` of the public key); the proofs of
       :mod:`veil.crypto.threshold` draw their masks accordingly.
    6. Key confirmation: every party partially decrypts a public test ciphertext with
       its proof; every party verifies all proofs (naming a cheater) and combines.

Caveats stated plainly: p and q are not safe primes (generating shared safe primes costs
orders of magnitude more), so the group of squares mod N^2 may have elements of small
order and the decryption proofs bind a party only up to such elements (the issue
Damgard-Koprowski and Fouque-Stern address with extra assumptions); under the
honest-but-curious model this does not matter. The public key has no fixed noise base
(encryption draws r^N), since making one needs p and q.

Parameters: ``bits`` >= 2048 (``insecure_ok=True`` allows 256.. for tests and demos),
``stat_bits`` >= 40 for the biprimality test, masks hide with 128 bits.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import math
import struct
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import gmpy2
from gmpy2 import mpz

from veil._validation import check_int
from veil.crypto import serialization, threshold
from veil.crypto._primes import _PRIMES
from veil.crypto.paillier import EncryptedNumber, check_key_bits
from veil.errors import ConfigError, CryptoError, ProtocolError
from veil.random import Generator as Rng
from veil.random import check_rng

__all__ = ["KeygenParty", "KeygenAbort", "KeygenParams", "distributed_keygen", "run_local",
           "RunStats"]

log = logging.getLogger(__name__)

_SIGMA = 128                    # statistical hiding of every masked opening and share
_MIN_BITS = 256                 # smallest modulus, tests and demos only (insecure_ok)
_TRIAL_BOUND = 1 << 16          # public trial division of every opened N
_MAGIC = b"VDKG"
_HEADER = struct.Struct(">4s16sHI16s")  # magic, session, sender, round, transcript digest
_MAX_PARTIES = 64


class KeygenAbort(ProtocolError):
    """Key generation stopped because of party ``party`` (a bad message, or it left), or,
    with ``party`` None, for a reason no one can be blamed for (module docstring, "Blame")."""

    def __init__(self, party: int | None, message: str) -> None:
        super().__init__(message if party is None else f"party {party}: {message}")
        self.party = party
        self.reason = message


# ----------------------------------------------------------------------------- parameters

def _ring_above(bits: int, parties: int) -> mpz:
    """The least P = 2^bits + c (c odd) with no prime factor up to ``parties`` (public)."""
    small = math.factorial(parties)
    p = (mpz(1) << bits) + 1
    while gmpy2.gcd(p, small) != 1:
        p += 2
    return p


def _sieve_modulus(target_bits: int) -> tuple[mpz, int]:
    """M = 3 * 5 * 7 * ... (consecutive odd primes while M < 2^target_bits), largest prime."""
    m, last = mpz(1), 2
    for l in _PRIMES.tolist():
        if (m * l).bit_length() > target_bits:
            break
        m, last = m * l, l
    return m, last


@dataclass(frozen=True)
class KeygenParams:
    """The public parameters every party derives from (bits, parties, threshold, stat_bits)."""

    bits: int
    parties: int
    threshold: int
    stat_bits: int
    batch: int
    tau: int = field(init=False)
    half: int = field(init=False)
    sieve: mpz = field(init=False)
    sieve_bound: int = field(init=False)
    field_a: mpz = field(init=False)
    field_n: mpz = field(init=False)
    field_k: mpz = field(init=False)
    delta: int = field(init=False)

    def __post_init__(self) -> None:
        n, h = self.parties, self.bits // 2
        s = object.__setattr__
        s(self, "tau", (n - 1) // 2)
        s(self, "half", h)
        sieve, bound = _sieve_modulus(min(256, h // 2 - 16))
        s(self, "sieve", sieve)
        s(self, "sieve_bound", bound)
        c = self.tau + 1
        s(self, "field_a", _ring_above(c * sieve.bit_length() + _SIGMA + n.bit_length() + 2, n))
        s(self, "field_n", _ring_above(self.bits + 1, n))
        s(self, "field_k", _ring_above(2 * self.bits + _SIGMA + (n * n + n).bit_length() + 2,
                                       n))
        s(self, "delta", math.factorial(n))

    @classmethod
    def make(cls, bits: int, parties: int, threshold: int, *, stat_bits: int = 40,
             insecure_ok: bool = False, batch: int | None = None) -> KeygenParams:
        bits = check_key_bits(bits, insecure_ok)
        if bits < _MIN_BITS:
            raise ConfigError(f"bits={bits} is not allowed for distributed key generation: "
                              f"must be >= {_MIN_BITS} (and >= 2048 outside tests)")
        parties = check_int(parties, "parties", low=3, high=_MAX_PARTIES)
        if isinstance(threshold, int) and not isinstance(threshold, bool) and \
                threshold > parties:
            raise ConfigError(f"threshold={threshold} is not allowed: fewer parties "
                              f"({parties}) than the threshold cannot ever decrypt")
        threshold = check_int(threshold, "threshold", low=1, high=parties)
        stat_bits = check_int(stat_bits, "stat_bits", low=40, high=256)
        if batch is None:
            batch = _default_batch(bits)
        batch = check_int(batch, "batch", low=1, high=1 << 14)
        return cls(bits, parties, threshold, stat_bits, batch)

    def max_message(self) -> int:
        """An upper bound on the bytes of one message (a runtime's frame bound): the
        largest of the rounds' payloads (sieve shares: 3 values of Z_{P_A} per candidate
        as a first-tau+1 party deals them, or a re-share of ceil((tau+1)/2) products;
        modulus shares: 3 of Z_{P_N} per pair; biprimality: ``stat_bits`` residues mod N
        per pair; the key-share and confirmation rounds: a few elements of Z_{N^2} and of
        the share range), plus the header and slack."""
        pairs, wide = 2 * self.batch, _width(mpz(1) << (2 * self.bits + _SIGMA + 2 * _MAX_PARTIES))
        payloads = (max(3, (self.tau + 2) // 2) * pairs * _width(self.field_a),
                    3 * self.batch * _width(self.field_n),
                    self.batch * self.stat_bits * _width(mpz(1) << self.bits),
                    (self.threshold + 16) * 2 * wide, 2 * pairs * _width(self.field_k))
        return _HEADER.size + max(payloads) + (1 << 16)

    def expected_pairs(self) -> float:
        """Expected number of candidate pairs (p, q) formed before both are prime."""
        odd_prime = 2 / (self.half * math.log(2))            # P(prime | odd, h bits)
        survive = 1.0
        for l in _PRIMES.tolist():
            if l > self.sieve_bound:
                break
            survive *= 1 - 1 / l
        return (survive / odd_prime) ** 2


def _default_batch(bits: int) -> int:
    """Candidate pairs per attempt: about a quarter of the expected number (bounded)."""
    h = bits // 2
    expected = KeygenParams(bits, 3, 2, 40, 1).expected_pairs() if h >= 128 else 64
    return int(min(1024, max(16, expected // 4)))


# ----------------------------------------------------------------------------- helpers

def _width(bound: int) -> int:
    return (int(bound).bit_length() + 7) // 8


def _randints(rng: Rng, count: int, bound: int) -> list[mpz]:
    """``count`` integers uniform in [0, bound) up to 2^-128 (16 extra random bytes each)."""
    if count == 0:
        return []
    w = _width(bound) + 16
    raw = rng.bytes(w * count)
    b = mpz(bound)
    return [mpz(int.from_bytes(raw[k:k + w], "big")) % b for k in range(0, w * count, w)]


def _units(rng: Rng, count: int, m: mpz) -> list[mpz]:
    """``count`` uniform units of Z_m (rejection sampling)."""
    out: list[mpz] = []
    while len(out) < count:
        out.extend(x for x in _randints(rng, 2 * (count - len(out)) + 8, m)
                   if gmpy2.gcd(x, m) == 1)
    return out[:count]


def _pack(values: Sequence[int], width: int) -> bytes:
    """Non-negative integers below 2^(8 width), each as ``width`` little-endian bytes."""
    if not values:
        return b""
    return int(gmpy2.pack(list(values), 8 * width)).to_bytes(width * len(values), "little")


def _pack_signed(values: Sequence[int], width: int) -> bytes:
    return b"".join(int(v).to_bytes(width, "little", signed=True) for v in values)


class _Reader:
    """Reads fixed-width integers from a peer's payload; any violation names the peer."""

    def __init__(self, data: bytes, sender: int, what: str) -> None:
        self.data, self.sender, self.what, self.pos = data, sender, what, 0

    def fail(self, reason: str) -> KeygenAbort:
        return KeygenAbort(self.sender, f"malformed {self.what} message: {reason}")

    def ints(self, count: int, bound: int, *, signed: bool = False) -> list[mpz]:
        w = _width(bound) + (1 if signed else 0)
        end = self.pos + count * w
        if end > len(self.data):
            raise self.fail(f"{len(self.data)} bytes, expected at least {end}")
        chunk = self.data[self.pos:end]
        self.pos = end
        if signed:
            out = [mpz(int.from_bytes(chunk[k:k + w], "little", signed=True))
                   for k in range(0, len(chunk), w)]
            ok = all(-bound < x < bound for x in out)
        else:
            out = gmpy2.unpack(mpz(int.from_bytes(chunk, "little")), 8 * w) if count else []
            out += [mpz(0)] * (count - len(out))           # unpack drops leading zeros
            ok = not out or max(out) < bound
        if not ok:
            raise self.fail(f"value out of range (bound {int(bound).bit_length()} bits)")
        return out

    def blob(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise self.fail("truncated")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} trailing bytes")


def _lagrange_at_zero(points: Sequence[int], prime: mpz) -> list[mpz]:
    out = []
    for i in points:
        num, den = mpz(1), mpz(1)
        for j in points:
            if j != i:
                num = num * j % prime
                den = den * (j - i) % prime
        out.append(num * gmpy2.invert(den, prime) % prime)
    return out


def _coin(session: bytes, label: bytes, *values: int) -> bytes:
    """A public random seed from the session, a label and public values (SHAKE-256)."""
    h = hashlib.shake_256(b"veil.dkg." + label + session)
    for v in values:
        v = int(v)
        h.update(v.to_bytes((v.bit_length() + 8) // 8, "big"))
    return h.digest(32)


def _coin_int(seed: bytes, counter: int, bound: int) -> mpz:
    raw = hashlib.shake_256(seed + counter.to_bytes(4, "big")).digest(_width(bound) + 16)
    return mpz(int.from_bytes(raw, "big")) % bound


def _jacobi_one(seed: bytes, n: mpz, count: int) -> list[mpz] | None:
    """``count`` public g in Z_n^* with Jacobi symbol 1 (None if one shares a factor with n)."""
    out, k = [], 0
    while len(out) < count:
        g = _coin_int(seed, k, n)
        k += 1
        j = gmpy2.jacobi(g, n)
        if j == 0:
            return None
        if j == 1:
            out.append(g)
    return out


@functools.lru_cache(maxsize=8)
def _trial_product(low: int) -> mpz:
    """The product of the primes in (low, 2^16): N shares a factor with it iff p or q does."""
    return math.prod((mpz(l) for l in _PRIMES.tolist() if low < l < _TRIAL_BOUND), start=mpz(1))


# ----------------------------------------------------------------------------- the party

Outgoing = list[tuple[int, bytes]]
Round = Generator[dict[int, bytes], dict[int, bytes], Any]


class KeygenParty:
    """Party ``index`` (1..n) of a distributed threshold Paillier key generation (sans-I/O).

    :meth:`start` returns the first messages as ``(recipient, bytes)`` pairs;
    :meth:`receive` takes one message from a peer and returns the next ones. When
    :attr:`done`, :meth:`result` gives ``(ThresholdPublicKey, KeyShare)``. Every party
    of a run must have the same ``session`` (16 bytes) and parameters. Any bad message
    raises :class:`KeygenAbort` naming its sender, after which the party has dropped
    its secrets and refuses further messages.
    """

    def __init__(self, index: int, params: KeygenParams, session: bytes, *,
                 rng: Any = None) -> None:
        if not isinstance(params, KeygenParams):
            raise ConfigError("params must be a KeygenParams (KeygenParams.make(...))")
        self.params = params
        self.index = check_int(index, "index", low=1, high=params.parties)
        if not isinstance(session, bytes) or len(session) != 16:
            raise ConfigError(f"session={session!r} is not allowed: 16 bytes, the same for "
                              "every party of the run")
        self.session = session
        self._rng = check_rng(rng)
        self._round = 0
        self._inbox: dict[int, tuple[bytes, bytes]] = {}    # sender -> (transcript, body)
        self._early: dict[int, tuple[bytes, bytes]] = {}
        self._seen = bytes(16)       # digest of every value opened so far (as seen here)
        self._sent = self._seen      # the digest this party's messages of this round carry
        self._gen: Round | None = None
        self._started = False
        self._result: tuple[threshold.ThresholdPublicKey, threshold.KeyShare] | None = None
        self._aborted: str | None = None
        self.attempts = 0
        self.candidates = 0

    # -- driving ------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def round(self) -> int:
        return self._round

    def waiting_for(self) -> list[int]:
        """The peers whose message for the current round has not arrived."""
        if self.done or self._aborted or self._gen is None:
            return []
        return [j for j in self._peers() if j not in self._inbox]

    def result(self) -> tuple[threshold.ThresholdPublicKey, threshold.KeyShare]:
        if self._result is None:
            raise ProtocolError(f"party {self.index}: key generation has not finished"
                                + (f" (aborted: {self._aborted})" if self._aborted else ""))
        return self._result

    def start(self) -> Outgoing:
        if self._started:
            raise ProtocolError(f"party {self.index}: already started")
        self._started = True
        self._gen = self._protocol()

        def first() -> Outgoing:
            out = self._frame(next(self._gen))
            self._inbox, self._early = self._early, {}   # round-1 messages that came early
            return out + self._advance()
        return self._guard(first)

    def receive(self, sender: int, message: bytes) -> Outgoing:
        if self._aborted:
            raise ProtocolError(f"party {self.index}: key generation was aborted "
                                f"({self._aborted})")
        if self.done:
            raise KeygenAbort(sender, "message after the key generation finished")
        return self._guard(lambda: self._accept(sender, message))

    def abort(self, reason: str) -> None:
        """Stop and drop every secret (called on any failure, also by runtimes)."""
        self._aborted = reason
        self._inbox.clear()
        self._early.clear()
        if self._gen is not None:
            self._gen.close()
        self._result = None

    def _guard(self, step: Callable[[], Outgoing]) -> Outgoing:
        try:
            return step()
        except KeygenAbort as exc:
            self.abort(str(exc))
            raise
        except (ProtocolError, CryptoError) as exc:
            self.abort(str(exc))
            raise ProtocolError(f"party {self.index}: key generation failed: {exc}") from exc

    def _peers(self) -> list[int]:
        return [j for j in range(1, self.params.parties + 1) if j != self.index]

    def _frame(self, out: dict[int, bytes]) -> Outgoing:
        self._round += 1
        self._sent = self._seen
        head = _HEADER.pack(_MAGIC, self.session, self.index, self._round, self._sent)
        return [(j, head + out[j]) for j in self._peers()]

    def _fold(self, values: Sequence[int]) -> None:
        """Add opened (or broadcast) values to this party's transcript digest."""
        h = hashlib.sha256(b"veil.dkg.transcript" + self._seen)
        for v in values:
            h.update(int(v).to_bytes((int(v).bit_length() + 8) // 8, "big", signed=True) + b";")
        self._seen = h.digest()[:16]

    def _accept(self, sender: int, message: bytes) -> Outgoing:
        if not isinstance(sender, int) or sender not in self._peers():
            raise ProtocolError(f"party {self.index}: message from unknown sender {sender!r}")
        if not isinstance(message, (bytes, bytearray)) or len(message) < _HEADER.size:
            raise KeygenAbort(sender, "message too short or not bytes")
        magic, session, claimed, rnd, seen = _HEADER.unpack_from(message)
        if magic != _MAGIC or session != self.session or claimed != sender:
            raise KeygenAbort(sender, "wrong magic, session or sender in the header")
        body = bytes(message[_HEADER.size:])
        if rnd == self._round and sender not in self._inbox:
            self._inbox[sender] = (seen, body)
        elif rnd == self._round + 1 and sender not in self._early:
            self._early[sender] = (seen, body)
        else:
            raise KeygenAbort(sender, f"replayed or out-of-order message (round {rnd}, "
                                      f"expected {self._round})")
        return self._advance()

    def _advance(self) -> Outgoing:
        """Run the protocol on while a round's messages are all in."""
        out: Outgoing = []
        while len(self._inbox) == len(self._peers()) and self._gen is not None:
            inbox, self._inbox, self._early = self._inbox, self._early, {}
            differ = sorted(j for j, (seen, _) in inbox.items() if seen != self._sent)
            if differ:
                raise KeygenAbort(None, f"parties {differ} and party {self.index} saw different "
                                        f"values opened before round {self._round}: a party "
                                        "sent different or false openings; nothing here "
                                        "proves which, so no party is named")
            try:
                out.extend(self._frame(self._gen.send({j: b for j, (_, b) in inbox.items()})))
            except StopIteration as stop:
                self._result = stop.value
                self._gen = None
        return out

    # -- BGW building blocks ----------------------------------------------------------
    def _share(self, values: Sequence[int], prime: mpz, tau: int) -> dict[int, list[mpz]]:
        """Shamir shares of degree tau over Z_prime: {party: [share of each value]}."""
        n = self.params.parties
        coeffs = _randints(self._rng, len(values) * tau, prime)
        out: dict[int, list[mpz]] = {j: [] for j in range(1, n + 1)}
        for k, v in enumerate(values):
            cs = coeffs[k * tau:(k + 1) * tau]
            for j in range(1, n + 1):
                acc = mpz(0)
                for c in reversed(cs):
                    acc = (acc + c) * j
                out[j].append((acc + v) % prime)
        return out

    def _exchange_shares(self, values: Sequence[int], prime: mpz, what: str, *,
                         zeros: int = 0, expect: Callable[[int], int] | None = None) -> Round:
        """Deal degree-tau shares of ``values`` and degree-2 tau shares of ``zeros`` zeros.

        Returns ({party: the value shares it dealt me}, [my shares of the summed zeros]);
        ``expect(j)``: how many values party j deals (default: as many as I do).
        """
        tau = self.params.tau
        shares = self._share(values, prime, tau)
        zero = self._share([0] * zeros, prime, 2 * tau)
        w = _width(prime)
        inbox = yield {j: _pack(shares[j] + zero[j], w) for j in self._peers()}
        dealt = {self.index: shares[self.index]}
        zsum = list(zero[self.index])
        for j, data in inbox.items():
            r = _Reader(data, j, what)
            count = len(values) if expect is None else expect(j)
            got = r.ints(count + zeros, prime)
            r.end()
            dealt[j] = got[:count]
            zsum = [(a + b) % prime for a, b in zip(zsum, got[count:])]
        return dealt, zsum

    def _open(self, mine: Sequence[mpz], prime: mpz, what: str) -> Round:
        """Everyone broadcasts its shares (degree <= n - 1) and interpolates at 0."""
        w = _width(prime)
        inbox = yield {j: _pack(mine, w) for j in self._peers()}
        n = self.params.parties
        got = {self.index: list(mine)}
        for j, data in inbox.items():
            r = _Reader(data, j, what)
            got[j] = r.ints(len(mine), prime)
            r.end()
        lam = _lagrange_at_zero(list(range(1, n + 1)), prime)
        opened = [sum(lam[j - 1] * got[j][k] for j in range(1, n + 1)) % prime
                  for k in range(len(mine))]
        self._fold(opened)
        return opened

    # -- the protocol -------------------------------------------------------------------
    def _protocol(self) -> Round:
        P = self.params
        while True:
            self.attempts += 1
            found = yield from self._attempt()
            if found is not None:
                key = yield from self._derive_key(*found)
                if key is not None:
                    return key
            log.debug("party %d: attempt %d found no biprime", self.index, self.attempts)
            if self.attempts > 100000 // P.batch + 1000:
                raise ProtocolError("no biprime modulus after too many attempts")

    def _sieved_shares(self, count: int) -> Round:
        """Additive shares of ``count`` integers with no prime factor up to the sieve bound."""
        P = self.params
        M, pa, n, c = P.sieve, P.field_a, P.parties, P.tau + 1
        mask_bound = (mpz(1) << _SIGMA) * M ** c
        units = _units(self._rng, count, M) if self.index <= c else []
        masks = _randints(self._rng, count, mask_bound)
        dealt, zero = yield from self._exchange_shares(
            units + masks, pa, "sieve share", zeros=count,
            expect=lambda j: count * (2 if j <= c else 1))
        factors = [dealt[j][:count] for j in range(1, c + 1)]
        rho = [sum(dealt[j][(count if j <= c else 0) + k] for j in range(1, n + 1)) % pa
               for k in range(count)]
        # product tree: re-share every product that is multiplied again
        while len(factors) > 2:
            nxt = [[a * b % pa for a, b in zip(factors[i], factors[i + 1])]
                   for i in range(0, len(factors) - 1, 2)]
            flat = [x for vec in nxt for x in vec]
            got, _ = yield from self._exchange_shares(flat, pa, "re-share")
            lam = _lagrange_at_zero(list(range(1, n + 1)), pa)
            reduced = [sum(lam[j - 1] * got[j][k] for j in range(1, n + 1)) % pa
                       for k in range(len(flat))]
            nxt = [reduced[i * count:(i + 1) * count] for i in range(len(nxt))]
            if len(factors) % 2:
                nxt.append(factors[-1])
            factors = nxt
        a, b = factors
        opened = yield from self._open([(x * y + m + z) % pa
                                        for x, y, m, z in zip(a, b, rho, zero)], pa,
                                       "sieve opening")
        if self.index == 1:
            return [(y - m) % M for y, m in zip(opened, masks)]
        return [(-m) % M for m in masks]

    def _candidate_shares(self, residues: list[mpz]) -> list[mpz]:
        """p_i = CRT(b_i mod M, 3 or 0 mod 4) + 4 M r_i (+ the public offset for party 1)."""
        P = self.params
        M, n, h = P.sieve, P.parties, P.half
        step = 4 * M
        offset = (3 * (mpz(1) << (h - 2)) + step - 1) // step * step
        r_max = ((mpz(1) << (h - 2)) - step * (n + 1)) // (step * n)
        rs = _randints(self._rng, len(residues), r_max)
        c = 3 if self.index == 1 else 0
        minv = gmpy2.invert(M, 4)       # x = b (M), x = c (4): x = b + M ((c - b) M^-1 mod 4)
        out = []
        for b, r in zip(residues, rs):
            x = b + M * ((c - b) * minv % 4)
            out.append(x + step * r + (offset if self.index == 1 else 0))
        return out

    def _attempt(self) -> Round:
        """One batch of candidate pairs: sieve, open N, trial division, biprimality."""
        P = self.params
        K = P.batch
        residues = yield from self._sieved_shares(2 * K)
        mine = self._candidate_shares(residues)
        ps, qs = mine[:K], mine[K:]
        self.candidates += K
        # N = p q: share p_i and q_i, multiply the sums locally, open
        pn = P.field_n
        dealt, zero = yield from self._exchange_shares(ps + qs, pn, "modulus share", zeros=K)
        psum = [sum(dealt[j][k] for j in dealt) % pn for k in range(K)]
        qsum = [sum(dealt[j][K + k] for j in dealt) % pn for k in range(K)]
        moduli = yield from self._open([(a * b + z) % pn for a, b, z in zip(psum, qsum, zero)],
                                       pn, "modulus")
        trial = _trial_product(P.sieve_bound)
        alive = [k for k, N in enumerate(moduli)
                 if N.bit_length() == P.bits and N % 4 == 1 and gmpy2.gcd(N, trial) == 1]
        # biprimality: one g for every survivor, then the rest for those that pass
        tested = alive
        for count in (1, P.stat_bits - 1):
            if not tested:
                return None
            gs = {}
            for k in tested:
                g = _jacobi_one(_coin(self.session, b"bf", moduli[k], self.attempts), moduli[k],
                                1 if count == 1 else P.stat_bits)
                if g is not None:
                    gs[k] = g if count == 1 else g[1:]
            tested = [k for k in tested if k in gs]
            values = []
            for k in tested:
                N = moduli[k]
                if self.index == 1:
                    e = (N + 1 - ps[k] - qs[k]) // 4
                else:
                    e = -((ps[k] + qs[k]) // 4)
                values.extend(gmpy2.powmod(g, e, N) for g in gs[k])
            wN = _width(mpz(1) << P.bits)
            inbox = yield {j: _pack(values, wN) for j in self._peers()}
            products = list(values)
            mods = [moduli[k] for k in tested for _ in gs[k]]
            for j, data in inbox.items():
                r = _Reader(data, j, "biprimality")
                got = r.ints(len(values), mpz(1) << P.bits)
                r.end()
                products = [a * b % N for a, b, N in zip(products, got, mods)]
            self._fold(products)
            passed, pos = [], 0
            for k in tested:
                N, m = moduli[k], len(gs[k])
                if all(x in (1, N - 1) for x in products[pos:pos + m]):
                    passed.append(k)
                pos += m
            tested = passed
        if not tested:
            return None
        k = tested[0]
        return moduli[k], ps[k], qs[k]

    def _derive_key(self, N: mpz, p_i: mpz, q_i: mpz) -> Round:
        """Shares of D = Delta phi B, integer Shamir shares, commitments, key confirmation."""
        P = self.params
        n, t, pk_field, delta = P.parties, P.threshold, P.field_k, P.delta
        # step 4a: gamma = phi R + N S, phi = N + 1 - sum(p_j + q_j)
        r_i = _randints(self._rng, 1, N)[0]
        s_i = _randints(self._rng, 1, (mpz(1) << _SIGMA) * n * N)[0]
        dealt, zero = yield from self._exchange_shares([p_i + q_i, r_i, s_i], pk_field,
                                                       "gamma share", zeros=1)
        sums = [sum(dealt[j][k] for j in dealt) % pk_field for k in range(3)]
        phi = (N + 1 - sums[0]) % pk_field
        (gamma_open,) = yield from self._open([(phi * sums[1] + N * sums[2] + zero[0])
                                               % pk_field],
                                              pk_field, "gamma")
        gamma = gamma_open % N
        if gmpy2.gcd(gamma, N) != 1:
            log.info("party %d: gcd(N, p + q - 1) != 1: candidate dropped", self.index)
            return None
        b_i = r_i * gmpy2.invert(delta * gamma, N) % N
        t_i = _randints(self._rng, 1, (mpz(1) << _SIGMA) * n * N * N)[0]
        dealt, zero = yield from self._exchange_shares([b_i, t_i], pk_field, "exponent share",
                                                       zeros=1)
        bsum = sum(d[0] for d in dealt.values()) % pk_field
        tsum = sum(d[1] for d in dealt.values()) % pk_field
        (w_open,) = yield from self._open([(phi * bsum + tsum + zero[0]) % pk_field],
                                          pk_field, "d")
        d_i = (w_open if self.index == 1 else 0) - t_i
        # step 5: integer Shamir shares of D = Delta d with Feldman commitments
        d_max = (n * n + n + 1) * (mpz(1) << _SIGMA) * N * N
        coef_bound = (mpz(1) << (_SIGMA + n)) * delta * d_max
        coeffs = [delta * d_i] + _randints(self._rng, t - 1, coef_bound)
        share_bound = n * (delta * d_max + coef_bound * sum(n ** k for k in range(1, t))) + 1
        sub_bound = share_bound // n + 1
        n2 = N * N
        v = _coin_int(_coin(self.session, b"v", N), 0, n2)
        v = v * v % n2
        commits = [gmpy2.powmod(v, a, n2) for a in coeffs]
        evals = {}
        for j in range(1, n + 1):
            acc = mpz(0)
            for a in reversed(coeffs):
                acc = acc * j + a
            evals[j] = acc
        wc, ws = _width(n2), _width(sub_bound) + 1
        inbox = yield {j: _pack(commits, wc) + _pack_signed([evals[j]], ws)
                       for j in self._peers()}
        all_commits = {self.index: commits}
        s = evals[self.index]
        for j, data in inbox.items():
            rd = _Reader(data, j, "key share")
            cj = rd.ints(t, n2)
            (fj,) = rd.ints(1, sub_bound, signed=True)
            rd.end()
            expect = mpz(1)
            for k, c in enumerate(cj):
                expect = expect * gmpy2.powmod(c, self.index ** k, n2) % n2
            if gmpy2.gcd(expect, N) != 1 or gmpy2.powmod(v, fj, n2) != expect:
                raise KeygenAbort(j, "its key share does not match its commitments")
            all_commits[j] = cj
            s += fj
        if not 0 <= s < share_bound:
            raise ProtocolError("the combined key share is out of range")
        self._fold([c for j in sorted(all_commits) for c in all_commits[j]])
        total = [math.prod(all_commits[j][k] for j in all_commits) % n2 for k in range(t)]
        vks = []
        for i in range(1, n + 1):
            acc = mpz(1)
            for k, c in enumerate(total):
                acc = acc * gmpy2.powmod(c, i ** k, n2) % n2
            vks.append(gmpy2.powmod(acc, delta, n2))
        pk = threshold.ThresholdPublicKey(N, parties=n, threshold=t, v=v, verification_keys=vks,
                                          share_bits=int(share_bound.bit_length()))
        share = threshold.KeyShare(pk, self.index, s)
        share.check()
        # step 6: key confirmation with a public test ciphertext
        seed = _coin(self.session, b"confirm", N)
        m_test = _coin_int(seed, 0, N)
        noise = _coin_int(seed, 1, N)
        c = EncryptedNumber(pk, (1 + m_test * N) * gmpy2.powmod(noise, N, n2) % n2)
        blob = serialization.dumps(share.partial_decrypt(c))
        inbox = yield {j: blob for j in self._peers()}
        partials = [serialization.loads(blob, public_key=pk)]
        for j, data in inbox.items():
            try:
                part = serialization.loads(data, public_key=pk)
                if not isinstance(part, threshold.PartialDecryption) or part.party != j:
                    raise CryptoError("not its own partial decryption")
                pk.verify(part, ciphertext=c)
            except CryptoError as exc:
                raise KeygenAbort(j, f"key confirmation: {exc}") from None
            partials.append(part)
        if pk.combine(partials, ciphertext=c) % N != m_test:
            raise ProtocolError("key confirmation failed: the test ciphertext does not "
                                "decrypt (a party deviated in an earlier round)")
        return pk, share


# ----------------------------------------------------------------------------- local runner

@dataclass
class RunStats:
    """What a local run cost: per party CPU seconds, bytes and messages sent; rounds."""

    wall: float
    cpu: list[float]
    bytes_sent: list[int]
    messages: list[int]
    rounds: int
    attempts: int
    candidates: int


def run_local(parties: Sequence[KeygenParty], *, drop: tuple[int, int] | None = None,
              tamper: Callable[[int, int, bytes], bytes] | None = None
              ) -> tuple[list[tuple[threshold.ThresholdPublicKey, threshold.KeyShare]],
                         RunStats]:
    """Run all parties in this process, delivering messages in order.

    ``drop=(party, round)``: that party stops sending from that round on (a dropout);
    ``tamper(sender, recipient, message) -> message``: edits messages in flight (tests).
    A party that everyone waits for raises :class:`KeygenAbort` naming it; any abort
    leaves no party holding a key.
    """
    n = len(parties)
    cpu, sent, msgs = [0.0] * n, [0] * n, [0] * n
    queue: collections.deque[tuple[int, int, bytes]] = collections.deque()
    start = time.perf_counter()

    def post(sender: int, out: Outgoing) -> None:
        for recipient, message in out:
            if drop is not None and sender == drop[0] and parties[sender - 1].round >= drop[1]:
                continue
            if tamper is not None:
                message = tamper(sender, recipient, message)
            sent[sender - 1] += len(message)
            msgs[sender - 1] += 1
            queue.append((sender, recipient, message))

    def call(i: int, fn: Callable[[], Outgoing]) -> None:
        t0 = time.process_time()
        try:
            out = fn()
        finally:
            cpu[i - 1] += time.process_time() - t0
        post(i, out)

    try:
        for party in parties:
            call(party.index, party.start)
        while not all(p.done for p in parties):
            if not queue:               # stuck: the party most waited for has left
                waits = [j for p in parties if not p.done for j in p.waiting_for()]
                culprit = max(set(waits), key=lambda j: (waits.count(j), -j)) if waits else 0
                raise KeygenAbort(culprit, "stopped sending (dropped out) before round "
                                           f"{max(p.round for p in parties)}")
            sender, recipient, message = queue.popleft()
            call(recipient, functools.partial(parties[recipient - 1].receive, sender, message))
    except ProtocolError as exc:
        for p in parties:
            p.abort(str(exc))
        raise
    stats = RunStats(time.perf_counter() - start, cpu, sent, msgs, parties[0].round,
                     parties[0].attempts, parties[0].candidates)
    return [p.result() for p in parties], stats


def distributed_keygen(bits: int = 2048, parties: int = 3, threshold: int = 2, *,
                       stat_bits: int = 40, insecure_ok: bool = False,
                       batch: int | None = None, rng: Any = None,
                       ) -> tuple[threshold.ThresholdPublicKey, list[threshold.KeyShare]]:
    """Dealer-free counterpart of :func:`veil.crypto.threshold.keygen`, run in one process.

    All ``parties`` run here (for tests, demos and single-host deployments); across
    machines run one :class:`KeygenParty` per host under a runtime. ``rng``: None (the
    CSPRNG) or a seed for tests (each party then draws from its own seeded stream).
    """
    params = KeygenParams.make(bits, parties, threshold, stat_bits=stat_bits,
                               insecure_ok=insecure_ok, batch=batch)
    base = check_rng(rng)
    streams = base.spawn(params.parties)
    session = base.bytes(16)
    members = [KeygenParty(i + 1, params, session, rng=streams[i])
               for i in range(params.parties)]
    results, stats = run_local(members)
    log.info("distributed keygen: %d bits, %d parties, %d attempts, %.1f s", params.bits,
             params.parties, stats.attempts, stats.wall)
    pk = results[0][0]
    return pk, [share for _, share in results]
