"""Threshold Paillier: any ``threshold`` of ``parties`` share holders decrypt; fewer learn nothing.

The scheme is Damgard & Jurik's threshold variant ("A generalisation, a simplification
and some applications of Paillier's probabilistic public-key system", PKC 2001) for s = 1,
which carries Shoup's threshold RSA technique ("Practical threshold signatures",
EUROCRYPT 2000) to Paillier, with a trusted dealer:

Key generation (dealer)
    Safe primes p = 2p' + 1, q = 2q' + 1; n = p q, m = p' q'. The decryption exponent d
    satisfies d = 0 (mod m) and d = 1 (mod n) (d = m (m^-1 mod n)). The dealer draws
    f(X) = d + a_1 X + ... + a_(t-1) X^(t-1) with a_k uniform mod n m, gives party i the
    share s_i = f(i) mod n m, and publishes v, a random square mod n^2 (it generates the
    cyclic group of squares, of order n m, with overwhelming probability), and the
    verification keys v_i = v^(Delta s_i) mod n^2 with Delta = parties!.
Partial decryption (party i)
    x_i = c^(2 Delta s_i) mod n^2.
Combination (anyone, from a set S of t parties)
    With integer Lagrange coefficients mu_i = L lambda_i, lambda_i = prod_{j in S, j != i}
    j / (j - i) and L the least common multiple of their denominators (so sum_i mu_i f(i)
    = L d; Shoup uses Delta lambda_i, L is the smallest such multiplier)::

        c' = prod_{i in S} x_i^(2 mu_i) = c^(4 Delta L d) = 1 + n (4 Delta L M mod n)  (mod n^2)

    because d kills the noise r^n (whose order divides 2m) and d = 1 (mod n), so
    M = L(c') (4 Delta L)^-1 mod n with L(u) = (u - 1) / n.

Proof of correct partial decryption (DJ 2001, made non-interactive with the Fiat-Shamir
heuristic over SHA-256): party i shows log_{c^4}(x_i^2) = log_v(v_i) (= Delta
s_i) with a Chaum-Pedersen proof: r uniform with |r| = |Delta n^2| + 256 bits,
a = v^r, b = (c^4)^r, e = H(..., a, b) (128 bits), z = r + e Delta s_i; the verifier
recomputes a = v^z v_i^(-e), b = (c^4)^z (x_i^2)^(-e) and checks e. Squaring maps
everything into the group of squares, of order n m with no small prime factors, where
the proof is sound (as DJ 2001 and Shoup 2000 argue for their verification proofs).

Keys generated without a dealer (:mod:`veil.crypto.dkg`) carry ``share_bits``: their
shares are Shamir shares over the integers (nobody knows n m to reduce them), below
2^share_bits instead of n^2, and the proofs draw r with |Delta 2^share_bits| + 256 bits.
Their primes are not safe primes, so the group of squares may have elements of small
order: the proofs then bind a party only up to such elements (see that module).

Vectors (and packed plaintexts) are proven in one batch: with 128-bit coefficients rho_j
derived by SHAKE-256 from the ciphertexts *and* the party's partial decryptions, the
party proves the single statement log_{C^4}(X^2) = log_v(v_i) for C = prod_j c_j^rho_j,
X = prod_j x_j^rho_j. If any x_j is wrong in the group of squares, X^2 = (C^4)^(Delta s_i)
holds with probability at most 2^-128 over rho (the small-exponents test of Bellare,
Garay & Rabin, EUROCRYPT 1998; the group has no elements of order below 2^128), and the
rho_j are fixed only after the x_j are.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil._validation import check_int
from veil.crypto._fastexp import FixedBase, multi_pow
from veil.crypto.paillier import (
    EncryptedArray,
    EncryptedNumber,
    PublicKey,
    check_key_bits,
    check_safe_primes,
    generate_safe_primes,
    make_noise_base,
)
from veil.errors import ConfigError, CryptoError
from veil.random import check_rng

__all__ = [
    "ThresholdPublicKey",
    "KeyShare",
    "PartialDecryption",
    "keygen",
    "generate_safe_primes",
]

_CHALLENGE_BITS = 128
_STAT_BITS = 128
_BATCH_BYTES = 16          # 128-bit batching coefficients


def _int_bytes(x: int, width: int) -> bytes:
    return int(x).to_bytes(width, "big")


class ThresholdPublicKey(PublicKey):
    """A Paillier public key whose decryption needs ``threshold`` of ``parties`` key shares.

    Encrypt and compute with it like any :class:`~veil.crypto.paillier.PublicKey`; decrypt
    with :meth:`combine` on partial decryptions from the key shares.
    """

    def __init__(self, n: int, *, parties: int, threshold: int, v: int,
                 verification_keys: Sequence[int], noise_base: int | None = None,
                 share_bits: int | None = None) -> None:
        super().__init__(n, noise_base=noise_base)
        self.parties = check_int(parties, "parties", low=1)
        self.threshold = check_int(threshold, "threshold", low=1, high=self.parties)
        if len(verification_keys) != self.parties:
            raise CryptoError(f"verification_keys has {len(verification_keys)} entries; "
                              f"expected one per party ({self.parties})")
        self.v = self._check_ciphertext(v, "v")
        self.verification_keys = tuple(self._check_ciphertext(vk, f"verification_keys[{i}]")
                                       for i, vk in enumerate(verification_keys))
        self.delta = math.factorial(self.parties)
        self._width = (self.bits * 2 + 7) // 8           # bytes of one residue mod n^2
        # shares lie below n^2 (dealer: reduced mod n m) or below 2^share_bits (no dealer)
        self.share_bits = None if share_bits is None else check_int(
            share_bits, "share_bits", low=self.n2.bit_length(), high=self.n2.bit_length() + 4096)
        self._share_bound = self.n2 if share_bits is None else mpz(1) << self.share_bits
        # |r| for the proofs: |Delta s_i| < |Delta bound|, plus challenge and statistical bits
        self._proof_bits = ((self.delta * self._share_bound).bit_length() + _CHALLENGE_BITS
                            + _STAT_BITS)

    _CACHES = PublicKey._CACHES + ("_v_table", "_v_lock")

    def _init_caches(self) -> None:
        super()._init_caches()
        self._v_table: FixedBase | None = None
        self._v_lock = threading.Lock()

    def _identity(self) -> tuple[int, ...]:
        extra = () if self.share_bits is None else (self.share_bits,)
        return (self.n, self.parties, self.threshold, self.v, *self.verification_keys, *extra)

    def __repr__(self) -> str:
        return (f"threshold.ThresholdPublicKey(bits={self.bits}, {self.threshold}-of-"
                f"{self.parties}, fingerprint={self.fingerprint.hex()})")

    def _v_pow(self, exponent: int) -> mpz:
        """v^exponent mod n^2 from a fixed-base table (built on first use: ~9 MB at 2048 bits)."""
        with self._v_lock:
            if self._v_table is None:
                self._v_table = FixedBase(self.v, self.n2, self._proof_bits + 1, window=4)
        return self._v_table.pow(exponent)

    # -- hashing ---------------------------------------------------------------
    def _digest(self, raw: np.ndarray) -> bytes:
        """SHA-256 of a vector of residues mod n^2 (with its shape and this key)."""
        h = hashlib.sha256(b"veil.threshold.values")
        h.update(self.fingerprint + len(raw.shape).to_bytes(1, "big"))
        for d in raw.shape:
            h.update(d.to_bytes(8, "big"))
        w = self._width
        h.update(b"".join(_int_bytes(x, w) for x in raw.ravel().tolist()))
        return h.digest()

    def _batch(self, party: int, c_digest: bytes, x_digest: bytes,
               cs: list[mpz], xs: list[mpz]) -> tuple[mpz, mpz]:
        """(C, X) = (prod c_j^rho_j, prod x_j^rho_j) with rho from SHAKE-256 (C = c for one)."""
        if len(cs) == 1:
            return cs[0], xs[0]
        seed = b"veil.threshold.batch" + self.fingerprint + party.to_bytes(4, "big") \
            + c_digest + x_digest
        rho = np.frombuffer(hashlib.shake_256(seed).digest(_BATCH_BYTES * len(cs)),
                            dtype=np.uint8).reshape(len(cs), _BATCH_BYTES)
        return multi_pow(cs, rho, self.n2), multi_pow(xs, rho, self.n2)

    def _challenge(self, party: int, c_digest: bytes, x_digest: bytes, *values: mpz) -> int:
        h = hashlib.sha256(b"veil.threshold.proof" + self.fingerprint + party.to_bytes(4, "big")
                           + c_digest + x_digest)
        for x in values:
            h.update(_int_bytes(x, self._width))
        return int.from_bytes(h.digest()[:_CHALLENGE_BITS // 8], "big")

    # -- verification and combination -------------------------------------------
    def _resolve(self, partial: PartialDecryption, ciphertext: Any) -> tuple[np.ndarray, bytes]:
        """The ciphertext vector a partial decryption refers to, checked against its digest."""
        c = ciphertext if ciphertext is not None else partial.ciphertext
        if c is None:
            raise CryptoError(f"partial decryption from party {partial.party} carries no "
                              "ciphertext (it was deserialized): pass ciphertext=")
        if not isinstance(c, (EncryptedNumber, EncryptedArray)):
            raise CryptoError(f"ciphertext={c!r} is not an EncryptedNumber or EncryptedArray")
        if c.public_key != self:
            raise CryptoError("the ciphertext is not under this threshold key "
                              f"({c.public_key.fingerprint.hex()} != {self.fingerprint.hex()})")
        raw = np.asarray(c._raw, dtype=object)
        return raw, self._digest(raw)

    def verify(self, partial: PartialDecryption, ciphertext: Any = None) -> None:
        """Check the party's proof of correct partial decryption; CryptoError names the party."""
        raw, c_digest = self._resolve(partial, ciphertext)
        self._verify(partial, raw, c_digest)

    def _verify(self, partial: PartialDecryption, raw: np.ndarray, c_digest: bytes) -> None:
        i = partial.party
        who = f"party {i}"
        if not isinstance(partial, PartialDecryption) or partial.public_key != self:
            raise CryptoError(f"{who}: not a partial decryption under this key")
        if not 1 <= i <= self.parties:
            raise CryptoError(f"party {i} is not allowed: parties are numbered 1..{self.parties}")
        if partial.ciphertext_digest != c_digest or partial.values.shape != raw.shape:
            raise CryptoError(f"{who}: the partial decryption is for a different ciphertext")
        e, z = partial.proof
        if not (0 <= e < 1 << _CHALLENGE_BITS and 0 <= z < 1 << (self._proof_bits + 1)):
            raise CryptoError(f"{who}: the proof of correct decryption is malformed")
        n2 = self.n2
        xs = partial.values.ravel().tolist()
        x_digest = self._digest(partial.values)
        C, X = self._batch(i, c_digest, x_digest, raw.ravel().tolist(), xs)
        u, y = gmpy2.powmod(C, 4, n2), gmpy2.powmod(X, 2, n2)
        vi = self.verification_keys[i - 1]
        a = self._v_pow(z) * gmpy2.powmod(vi, -e, n2) % n2
        b = gmpy2.powmod(u, z, n2) * gmpy2.powmod(y, -e, n2) % n2
        if self._challenge(i, c_digest, x_digest, u, y, a, b) != e:
            raise CryptoError(f"{who}: the proof of correct decryption does not verify: its "
                              "partial decryption is wrong or forged")

    def combine(self, partials: Sequence[PartialDecryption], ciphertext: Any = None) -> Any:
        """The plaintext (int, or object array of ints) from ``threshold`` valid partials.

        Every proof is verified first (a bad one raises CryptoError naming its party);
        fewer than ``threshold`` distinct parties, or a party twice, raise CryptoError.
        ``ciphertext``: needed only when the partials were deserialized.
        """
        partials = list(partials)
        if not partials:
            raise CryptoError(f"no partial decryptions: need {self.threshold}")
        for p in partials:
            if not isinstance(p, PartialDecryption):
                raise CryptoError(f"{p!r} is not a PartialDecryption")
        seen: set[int] = set()
        for p in partials:
            if p.party in seen:
                raise CryptoError(f"party {p.party} contributed more than one partial decryption")
            seen.add(p.party)
        if len(partials) < self.threshold:
            raise CryptoError(f"{len(partials)} partial decryption(s) from parties "
                              f"{sorted(seen)}: need {self.threshold} distinct parties")
        raw, c_digest = self._resolve(partials[0], ciphertext)
        for p in partials:
            self._verify(p, raw, c_digest)
        chosen = sorted(partials, key=lambda p: p.party)[:self.threshold]
        subset = [p.party for p in chosen]
        lambdas = [math.prod(Fraction(j, j - i) for j in subset if j != i) for i in subset]
        scale = math.lcm(*(f.denominator for f in lambdas))
        mus = [int(f * scale) for f in lambdas]
        n, n2 = self.n, self.n2
        size = raw.size
        num = [mpz(1)] * size
        den = [mpz(1)] * size
        for p, mu in zip(chosen, mus):
            if mu == 0:
                continue
            powers = gmpy2.powmod_base_list(p.values.ravel().tolist(), 2 * abs(mu), n2)
            if mu > 0:
                num = [a * b % n2 for a, b in zip(num, powers)]
            else:
                den = [a * b % n2 for a, b in zip(den, powers)]
        inv = gmpy2.invert(4 * self.delta * scale, n)
        half = self.half
        out = []
        for a, b in zip(num, den):
            c = a * gmpy2.invert(b, n2) % n2 if b != 1 else a
            m = (c - 1) // n * inv % n
            out.append(int(m - n) if m > half else int(m))
        if raw.ndim == 0:
            return out[0]
        result = np.empty(size, dtype=object)
        result[:] = out
        return result.reshape(raw.shape)


class PartialDecryption:
    """Party ``party``'s share x_i = c^(2 Delta s_i) of a decryption, with its proof (e, z)."""

    __slots__ = ("public_key", "party", "values", "ciphertext_digest", "proof", "ciphertext")

    def __init__(self, public_key: ThresholdPublicKey, party: int, values: np.ndarray,
                 ciphertext_digest: bytes, proof: tuple[int, int],
                 ciphertext: EncryptedNumber | EncryptedArray | None = None) -> None:
        self.public_key = public_key
        self.party = party
        self.values = values
        self.ciphertext_digest = ciphertext_digest
        self.proof = proof
        self.ciphertext = ciphertext

    def __repr__(self) -> str:
        return f"PartialDecryption(party={self.party}, shape={self.values.shape})"


class KeyShare:
    """Party ``index``'s secret share s_i of the decryption exponent (keep it private)."""

    def __init__(self, public_key: ThresholdPublicKey, index: int, share: int) -> None:
        if not isinstance(public_key, ThresholdPublicKey):
            raise ConfigError("public_key must be a ThresholdPublicKey")
        self.public_key = public_key
        self.index = check_int(index, "index", low=1, high=public_key.parties)
        self._share = mpz(share)
        if not 0 <= self._share < public_key._share_bound:
            raise CryptoError(f"the key share of party {index} is out of range")

    def __repr__(self) -> str:
        pk = self.public_key
        return (f"threshold.KeyShare(party={self.index} of {pk.parties}, "
                f"key={pk.fingerprint.hex()[:8]})")

    def check(self) -> None:
        """CryptoError unless this share matches its published verification key."""
        pk = self.public_key
        expected = pk.verification_keys[self.index - 1]
        if gmpy2.powmod(pk.v, pk.delta * self._share, pk.n2) != expected:
            raise CryptoError(f"the key share of party {self.index} does not match its "
                              "verification key")

    def partial_decrypt(self, ciphertext: EncryptedNumber | EncryptedArray, *,
                        rng: Any = None) -> PartialDecryption:
        """x = c^(2 Delta s_i) for every ciphertext, with a (batched) proof of correctness."""
        pk = self.public_key
        if not isinstance(ciphertext, (EncryptedNumber, EncryptedArray)):
            raise CryptoError(f"cannot decrypt {type(ciphertext).__name__}: pass an "
                              "EncryptedNumber or EncryptedArray")
        if ciphertext.public_key != pk:
            raise CryptoError("the ciphertext is not under this share's threshold key "
                              f"({ciphertext.public_key.fingerprint.hex()} != "
                              f"{pk.fingerprint.hex()})")
        rng = check_rng(rng)
        raw = np.asarray(ciphertext._raw, dtype=object)
        cs = raw.ravel().tolist()
        n2 = pk.n2
        secret = pk.delta * self._share
        xs = gmpy2.powmod_base_list(cs, 2 * secret, n2)
        values = np.empty(len(xs), dtype=object)
        values[:] = xs
        values = values.reshape(raw.shape)
        c_digest, x_digest = pk._digest(raw), pk._digest(values)
        C, X = pk._batch(self.index, c_digest, x_digest, cs, xs)
        u, y = gmpy2.powmod(C, 4, n2), gmpy2.powmod(X, 2, n2)
        r = mpz(rng.randbits(pk._proof_bits))
        a, b = pk._v_pow(r), gmpy2.powmod(u, r, n2)
        e = pk._challenge(self.index, c_digest, x_digest, u, y, a, b)
        z = int(r + e * secret)
        return PartialDecryption(pk, self.index, values, c_digest, (e, z), ciphertext)


def keygen(bits: int = 2048, parties: int = 3, threshold: int = 2, *,
           insecure_ok: bool = False, primes: tuple[int, int] | None = None,
           rng: Any = None) -> tuple[ThresholdPublicKey, list[KeyShare]]:
    """Trusted-dealer key generation: the public key and one :class:`KeyShare` per party.

    ``primes``: two pre-generated safe primes (from :func:`generate_safe_primes`) of
    ``bits / 2`` bits each; otherwise they are generated now. Keys under 2048 bits need
    ``insecure_ok=True``. The public key carries the fixed-base noise base h_s of
    :mod:`veil.crypto.paillier` (full-length exponents), so parties encrypt fast.
    """
    bits = check_key_bits(bits, insecure_ok)
    parties = check_int(parties, "parties", low=1, high=1000)
    threshold = check_int(threshold, "threshold", low=1, high=parties)
    rng = check_rng(rng)
    if primes is None:
        p, q = generate_safe_primes(bits, insecure_ok=insecure_ok, rng=rng)
    else:
        p, q = check_safe_primes(primes, bits)
    n = p * q
    m = (p - 1) // 2 * ((q - 1) // 2)
    nm = n * m
    d = m * gmpy2.invert(m, n)                       # d = 0 mod m, d = 1 mod n
    coeffs = [d] + [mpz(rng.randbelow(nm)) for _ in range(threshold - 1)]
    shares = []
    for i in range(1, parties + 1):
        acc = mpz(0)
        for a in reversed(coeffs):                   # Horner: f(i) mod nm
            acc = (acc * i + a) % nm
        shares.append(acc)
    n2 = n * n
    while True:
        r = mpz(rng.randbelow(n2))
        if gmpy2.gcd(r, n) == 1:
            break
    v = r * r % n2
    delta = math.factorial(parties)
    verification = gmpy2.powmod_exp_list(gmpy2.powmod(v, delta, n2), shares, n2)
    pk = ThresholdPublicKey(n, parties=parties, threshold=threshold, v=v,
                            verification_keys=verification,
                            noise_base=make_noise_base(p, q, rng))
    return pk, [KeyShare(pk, i + 1, s) for i, s in enumerate(shares)]
