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

Root decryption (``method="root"``: about 7x less work per party)
    A party's DJ exponent 2 Delta s_i has ~2 |n| bits because the shares live modulo n m
    (the order of the squares mod n^2): each partial decryption is a ~4,100-bit
    exponentiation mod n^2 at 2048 bits, and a party cannot reduce it (CRT needs p, q;
    every multiple of the group order it could use factors n). Root decryption moves the
    secret exponentiation down to Z_n^*, with half-length exponents on half-length
    numbers, by recovering the ciphertext's randomness first (Paillier 1999, section 5:
    with c = (1 + n)^M r^n, ``c mod n = r^n mod n`` and x -> x^n is a permutation of
    Z_n^*). It is Shoup's threshold RSA inversion (EUROCRYPT 2000) for the public
    exponent e = n on x = c mod n:

    * the dealer also shares d_R = n^-1 mod m over Z_m (f_R(0) = d_R, coefficients
      uniform mod m; party i holds s'_i = f_R(i) mod m) and publishes
      v'_i = v'^(Delta s'_i) mod n with v' = v mod n, a random square mod n (it generates
      QR_n, of order m, with overwhelming probability);
    * party i sends x_i = x^(2 Delta s'_i) mod n: a |Delta m|-bit exponent mod n;
    * combination: w = prod_i x_i^(2 mu_i) = x^(4 Delta L d_R) = r^(4 Delta L) (mod n),
      because sum_i mu_i s'_i = L d_R (mod m), x^(2m) = 1 in Z_n^* (lambda(n) = 2m) and
      n d_R = 1 (mod m). Since u = u' (mod n) implies u^n = u'^n (mod n^2),
      ``w^n = r^(4 Delta L n) (mod n^2)`` and ``c^(4 Delta L) w^-n = (1 + n)^(4 Delta L M)``:
      the combiner's work is one |n|-bit exponentiation mod n^2 per ciphertext, and
      ``M = L(c^(4 Delta L) w^-n) (4 Delta L)^-1 mod n``.

    Shoup's conditions hold for e = n: gcd(n, Delta) = 1 (p, q exceed the number of
    parties) and gcd(n, phi(n)) = 1; his proofs of correct share (below, in QR_n, whose
    order m has no small factors) carry over unchanged. *What changes for security*: the
    combination reveals w, a power of the randomness r of the decrypted ciphertext (Shoup
    simulates the parties' shares from the root y = r mod n), not only M. This reveals
    nothing more than M about ciphertexts of fresh encryptions and of their homomorphic
    combinations: for C = c_1 ... c_K with independent noise r_k uniform in the noise group
    (veil never reuses noise), r_C = r_1 ... r_K is uniform and independent of
    c_1 .. c_(K-1) whatever r_1 .. r_(K-1) are, and c_K is then determined by
    (c_1 .. c_(K-1), M_C, r_C); so (c_1 .. c_K, M_C, r_C) is simulated from M_C alone by
    encrypting zeros for c_1 .. c_(K-1) (IND-CPA, i.e. DCR) and a uniform r_C. Use
    ``method="dj"`` (the default) when the combiner must not learn the noise, e.g. for a
    ciphertext whose noise is also part of something kept secret.
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

from veil._validation import check_choice, check_int
from veil.crypto.fastexp import FixedBase, multi_pow
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
from veil.random import RngLike, check_rng, secure_rng

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
_METHODS = ("dj", "root")
_DOMAIN = {"dj": b"", "root": b".root"}   # separates the hashes of the two methods

#: the most parties a threshold key may have (Delta = parties! is in every exponent)
MAX_PARTIES = 1000


def _int_bytes(x: int, width: int) -> bytes:
    return int(x).to_bytes(width, "big")


class ThresholdPublicKey(PublicKey):
    """A Paillier public key whose decryption needs ``threshold`` of ``parties`` key shares.

    Encrypt and compute with it like any :class:`~veil.crypto.paillier.PublicKey`; decrypt
    with :meth:`combine` on partial decryptions from the key shares. ``verification_keys``
    v_i = v^(Delta s_i) mod n^2 check DJ partial decryptions, ``root_keys``
    v'_i = (v mod n)^(Delta s'_i) mod n root ones (None: a key dealt without root shares).
    """

    def __init__(self, n: int, *, parties: int, threshold: int, v: int,
                 verification_keys: Sequence[int], noise_base: int | None = None,
                 root_keys: Sequence[int] | None = None,
                 share_bits: int | None = None) -> None:
        super().__init__(n, noise_base=noise_base)
        self.parties = check_int(parties, "parties", low=1)
        if self.parties > MAX_PARTIES:
            raise CryptoError(f"parties={self.parties} is not allowed: 1 to {MAX_PARTIES}")
        self.threshold = check_int(threshold, "threshold", low=1, high=self.parties)
        if len(verification_keys) != self.parties:
            raise CryptoError(f"verification_keys has {len(verification_keys)} entries; "
                              f"expected one per party ({self.parties})")
        self.v = self._check_ciphertext(v, "v")
        self.verification_keys = tuple(self._check_ciphertext(vk, f"verification_keys[{i}]")
                                       for i, vk in enumerate(verification_keys))
        self.root_keys = None
        if root_keys is not None:
            if len(root_keys) != self.parties:
                raise CryptoError(f"root_keys has {len(root_keys)} entries; expected one per "
                                  f"party ({self.parties})")
            self.root_keys = tuple(self._check_unit(k, f"root_keys[{i}]")
                                   for i, k in enumerate(root_keys))
        self.delta = math.factorial(self.parties)
        self._width = (self.bits * 2 + 7) // 8           # bytes of one residue mod n^2
        # shares lie below n^2 (dealer: reduced mod n m) or below 2^share_bits (no dealer)
        self.share_bits = None if share_bits is None else check_int(
            share_bits, "share_bits", low=self.n2.bit_length(), high=self.n2.bit_length() + 4096)
        self._share_bound = self.n2 if share_bits is None else mpz(1) << self.share_bits
        # |r| for the proofs: |Delta s_i| < |Delta bound| (|Delta n| for the root shares, in
        # Z_m), plus challenge and statistical bits
        extra = _CHALLENGE_BITS + _STAT_BITS
        self._proof_bits = {"dj": (self.delta * self._share_bound).bit_length() + extra,
                            "root": (self.delta * self.n).bit_length() + extra}

    _CACHES = PublicKey._CACHES + ("_v_table", "_root_table", "_v_lock")

    def _init_caches(self) -> None:
        super()._init_caches()
        self._v_table: FixedBase | None = None        # v mod n^2, for the DJ proofs
        self._root_table: FixedBase | None = None     # v mod n, for the root proofs
        self._v_lock = threading.Lock()

    def _identity(self) -> tuple[int, ...]:
        extra = () if self.share_bits is None else (self.share_bits,)
        return (*super()._identity(), self.parties, self.threshold, self.v,
                *self.verification_keys, *(self.root_keys or ()), *extra)

    def _check_unit(self, x: Any, name: str) -> mpz:
        """A unit of Z_n given as an integer in [1, n) (CryptoError otherwise)."""
        x = mpz(x)
        if not (0 < x < self.n and gmpy2.gcd(x, self.n) == 1):
            raise CryptoError(f"{name} is not a unit in [1, n)")
        return x

    def _setting(self, method: str) -> tuple[mpz, tuple[int, ...]]:
        """The modulus and the verification keys of a partial-decryption method."""
        if method == "dj":
            return self.n2, self.verification_keys
        if self.root_keys is None:
            raise CryptoError("this threshold key carries no root-decryption keys (dealt "
                              "before they existed): use method='dj'")
        return self.n, self.root_keys

    def __repr__(self) -> str:
        return (f"threshold.ThresholdPublicKey(bits={self.bits}, {self.threshold}-of-"
                f"{self.parties}, fingerprint={self.fingerprint.hex()})")

    def _v_pow(self, exponent: int, method: str) -> mpz:
        """v^exponent mod n^2 (``dj``) or (v mod n)^exponent mod n (``root``) from a
        fixed-base table built on first use (~9 MB and ~2 MB at 2048 bits)."""
        name = "_v_table" if method == "dj" else "_root_table"
        with self._v_lock:
            if getattr(self, name) is None:
                modulus = self._setting(method)[0]
                setattr(self, name, FixedBase(self.v % modulus, modulus,
                                              self._proof_bits[method] + 1, window=4))
        return getattr(self, name).pow(exponent)

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

    def _batch(self, party: int, c_digest: bytes, x_digest: bytes, cs: list[mpz],
               xs: list[mpz], method: str) -> tuple[mpz, mpz]:
        """(C, X) = (prod c_j^rho_j, prod x_j^rho_j) with rho from SHAKE-256 (C = c for one)."""
        if len(cs) == 1:
            return cs[0], xs[0]
        seed = b"veil.threshold.batch" + _DOMAIN[method] + self.fingerprint \
            + party.to_bytes(4, "big") + c_digest + x_digest
        rho = np.frombuffer(hashlib.shake_256(seed).digest(_BATCH_BYTES * len(cs)),
                            dtype=np.uint8).reshape(len(cs), _BATCH_BYTES)
        modulus = self._setting(method)[0]
        return multi_pow(cs, rho, modulus), multi_pow(xs, rho, modulus)

    def _challenge(self, party: int, c_digest: bytes, x_digest: bytes, method: str,
                   *values: mpz) -> int:
        h = hashlib.sha256(b"veil.threshold.proof" + _DOMAIN[method] + self.fingerprint
                           + party.to_bytes(4, "big") + c_digest + x_digest)
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
        method = partial.method
        if method not in _METHODS:
            raise CryptoError(f"{who}: unknown partial-decryption method {method!r}")
        modulus, keys = self._setting(method)
        e, z = partial.proof
        if not (0 <= e < 1 << _CHALLENGE_BITS and 0 <= z < 1 << (self._proof_bits[method] + 1)):
            raise CryptoError(f"{who}: the proof of correct decryption is malformed")
        xs = partial.values.ravel().tolist()
        if method == "root":
            try:
                xs = [self._check_unit(x, "value") for x in xs]
            except (CryptoError, TypeError, ValueError):
                raise CryptoError(f"{who}: the partial decryption holds a value that is not a "
                                  "unit in [1, n): the proof of correct decryption fails"
                                  ) from None
        x_digest = self._digest(partial.values)
        C, X = self._batch(i, c_digest, x_digest, _bases(raw, self.n, method), xs, method)
        u, y = gmpy2.powmod(C, 4, modulus), gmpy2.powmod(X, 2, modulus)
        a = self._v_pow(z, method) * gmpy2.powmod(keys[i - 1], -e, modulus) % modulus
        b = gmpy2.powmod(u, z, modulus) * gmpy2.powmod(y, -e, modulus) % modulus
        if self._challenge(i, c_digest, x_digest, method, u, y, a, b) != e:
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
        methods = {p.method for p in partials}
        if len(methods) > 1:
            raise CryptoError(f"partial decryptions of different methods {sorted(methods)}: "
                              "all parties must use one")
        method = methods.pop()
        raw, c_digest = self._resolve(partials[0], ciphertext)
        for p in partials:
            self._verify(p, raw, c_digest)
        chosen = sorted(partials, key=lambda p: p.party)[:self.threshold]
        subset = [p.party for p in chosen]
        lambdas = [math.prod(Fraction(j, j - i) for j in subset if j != i) for i in subset]
        scale = math.lcm(*(f.denominator for f in lambdas))
        mus = [int(f * scale) for f in lambdas]
        n, n2 = self.n, self.n2
        modulus = self._setting(method)[0]
        size = raw.size
        num = [mpz(1)] * size
        den = [mpz(1)] * size
        for p, mu in zip(chosen, mus):
            if mu == 0:
                continue
            powers = gmpy2.powmod_base_list(p.values.ravel().tolist(), 2 * abs(mu), modulus)
            if mu > 0:
                num = [a * b % modulus for a, b in zip(num, powers)]
            else:
                den = [a * b % modulus for a, b in zip(den, powers)]
        exponent = 4 * self.delta * scale
        if method == "dj":       # num / den = c^(4 Delta L d) = 1 + n (4 Delta L M)
            lifted = [a * gmpy2.invert(b, n2) % n2 if b != 1 else a for a, b in zip(num, den)]
        else:                    # den / num = r^(-4 Delta L) mod n; lift its n-th power
            roots = [b * gmpy2.invert(a, n) % n for a, b in zip(num, den)]
            noise = gmpy2.powmod_base_list(roots, n, n2)
            powers = gmpy2.powmod_base_list(raw.ravel().tolist(), exponent, n2)
            lifted = [a * b % n2 for a, b in zip(powers, noise)]
        inv = gmpy2.invert(exponent, n)
        half = self.half
        out = []
        for c in lifted:
            if c % n != 1:
                raise CryptoError("the partial decryptions do not combine to a plaintext "
                                  "(inconsistent key material)")
            m = (c - 1) // n * inv % n
            out.append(int(m - n) if m > half else int(m))
        if raw.ndim == 0:
            return out[0]
        result = np.empty(size, dtype=object)
        result[:] = out
        return result.reshape(raw.shape)


def _bases(raw: np.ndarray, n: int, method: str) -> list[mpz]:
    """What a method exponentiates: the ciphertexts (``dj``) or their residues mod n."""
    cs = raw.ravel().tolist()
    return cs if method == "dj" else [c % n for c in cs]


class PartialDecryption:
    """Party ``party``'s share of a decryption, with its proof (e, z): x_i = c^(2 Delta s_i)
    mod n^2 (``method="dj"``) or (c mod n)^(2 Delta s'_i) mod n (``"root"``)."""

    __slots__ = ("public_key", "party", "values", "ciphertext_digest", "proof", "ciphertext",
                 "method")

    def __init__(self, public_key: ThresholdPublicKey, party: int, values: np.ndarray,
                 ciphertext_digest: bytes, proof: tuple[int, int],
                 ciphertext: EncryptedNumber | EncryptedArray | None = None,
                 method: str = "dj") -> None:
        self.public_key = public_key
        self.party = party
        self.values = values
        self.ciphertext_digest = ciphertext_digest
        self.proof = proof
        self.ciphertext = ciphertext
        self.method = method

    def __repr__(self) -> str:
        return (f"PartialDecryption(party={self.party}, shape={self.values.shape}, "
                f"method={self.method!r})")


class KeyShare:
    """Party ``index``'s secret shares (keep them private): s_i of the DJ decryption
    exponent and, for root decryption, s'_i of n^-1 mod m (``root_share``)."""

    def __init__(self, public_key: ThresholdPublicKey, index: int, share: int,
                 root_share: int | None = None) -> None:
        if not isinstance(public_key, ThresholdPublicKey):
            raise ConfigError("public_key must be a ThresholdPublicKey")
        self.public_key = public_key
        self.index = check_int(index, "index", low=1, high=public_key.parties)
        self._share = mpz(share)
        if not 0 <= self._share < public_key._share_bound:
            raise CryptoError(f"the key share of party {index} is out of range")
        self._root = None if root_share is None else mpz(root_share)
        if self._root is not None and not 0 <= self._root < public_key.n:
            raise CryptoError(f"the root key share of party {index} is out of range")

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
        root_ok = self._root is None if pk.root_keys is None else (
            self._root is not None and gmpy2.powmod(pk.v % pk.n, pk.delta * self._root, pk.n)
            == pk.root_keys[self.index - 1])
        if not root_ok:
            raise CryptoError(f"the root key share of party {self.index} does not match its "
                              "verification key")

    def partial_decrypt(self, ciphertext: EncryptedNumber | EncryptedArray, *,
                        method: str = "dj") -> PartialDecryption:
        """This party's share of the decryption of every ciphertext, with a (batched) proof
        of correctness: ``method="dj"`` x = c^(2 Delta s_i) mod n^2, ``"root"`` x = (c mod
        n)^(2 Delta s'_i) mod n (about 7x faster; the combiner learns a power of the
        ciphertext's noise too: see the module docstring).

        The proof's nonce r is *hedged* (no seed can reach it): r is SHAKE-256 over the
        secret share, the statement (party, method, ciphertexts, partials) and 32 fresh bytes
        of :func:`veil.random.secure_rng`, expanded to the proof's bit length. A repeated or
        predictable r would give away the share, ``s_i = (z - r) / (e Delta)``; with
        hedging r stays unpredictable if either the share or the fresh bytes are secret.
        """
        method = check_choice(method, "method", _METHODS)
        pk = self.public_key
        if not isinstance(ciphertext, (EncryptedNumber, EncryptedArray)):
            raise CryptoError(f"cannot decrypt {type(ciphertext).__name__}: pass an "
                              "EncryptedNumber or EncryptedArray")
        if ciphertext.public_key != pk:
            raise CryptoError("the ciphertext is not under this share's threshold key "
                              f"({ciphertext.public_key.fingerprint.hex()} != "
                              f"{pk.fingerprint.hex()})")
        modulus = pk._setting(method)[0]
        if method == "root" and self._root is None:
            raise CryptoError(f"party {self.index}'s key share has no root share: use "
                              "method='dj'")
        raw = np.asarray(ciphertext._raw, dtype=object)
        cs = _bases(raw, pk.n, method)
        secret = pk.delta * (self._share if method == "dj" else self._root)
        xs = gmpy2.powmod_base_list(cs, 2 * secret, modulus)
        values = np.empty(len(xs), dtype=object)
        values[:] = xs
        values = values.reshape(raw.shape)
        c_digest, x_digest = pk._digest(raw), pk._digest(values)
        C, X = pk._batch(self.index, c_digest, x_digest, cs, xs, method)
        u, y = gmpy2.powmod(C, 4, modulus), gmpy2.powmod(X, 2, modulus)
        r = _hedged_nonce(secret, pk._proof_bits[method], self.index, method.encode(),
                          c_digest, x_digest)
        a, b = pk._v_pow(r, method), gmpy2.powmod(u, r, modulus)
        e = pk._challenge(self.index, c_digest, x_digest, method, u, y, a, b)
        z = int(r + e * secret)
        return PartialDecryption(pk, self.index, values, c_digest, (e, z), ciphertext, method)


def _hedged_nonce(share: int, bits: int, *statement: Any) -> mpz:
    """A ``bits``-bit proof nonce from the share, the statement and fresh OS randomness."""
    h = hashlib.shake_256(b"veil.threshold.nonce")
    for part in (share, *statement):
        raw = part if isinstance(part, bytes) else int(part).to_bytes(
            (int(part).bit_length() + 8) // 8, "big", signed=True)
        h.update(len(raw).to_bytes(4, "big") + raw)
    h.update(secure_rng().bytes(32))
    return mpz(int.from_bytes(h.digest((bits + 7) // 8), "big") >> (-bits % 8))


def keygen(bits: int = 2048, parties: int = 3, threshold: int = 2, *,
           insecure_ok: bool = False, primes: tuple[int, int] | None = None,
           rng: RngLike = None) -> tuple[ThresholdPublicKey, list[KeyShare]]:
    """Trusted-dealer key generation: the public key and one :class:`KeyShare` per party.

    ``primes``: two pre-generated safe primes (from :func:`generate_safe_primes`) of
    ``bits / 2`` bits each; otherwise they are generated now. Keys under 2048 bits need
    ``insecure_ok=True``. The public key carries the fixed-base noise base h_s of
    :mod:`veil.crypto.paillier` (full-length exponents), so parties encrypt fast.
    """
    bits = check_key_bits(bits, insecure_ok)
    parties = check_int(parties, "parties", low=1, high=MAX_PARTIES)
    threshold = check_int(threshold, "threshold", low=1, high=parties)
    rng = check_rng(rng)
    if primes is None:
        p, q = generate_safe_primes(bits, insecure_ok=insecure_ok, rng=rng)
    else:
        p, q = check_safe_primes(primes, bits)
    n = p * q
    m = (p - 1) // 2 * ((q - 1) // 2)
    if gmpy2.gcd(n, m) != 1:                         # only if p = 2q + 1 or q = 2p + 1
        raise ConfigError("primes p and q are not allowed: one is 2 x the other + 1")
    nm = n * m
    d = m * gmpy2.invert(m, n)                       # d = 0 mod m, d = 1 mod n
    shares = _shamir(d, nm, threshold, parties, rng)
    root_shares = _shamir(gmpy2.invert(n, m), m, threshold, parties, rng)   # n^-1 mod m
    n2 = n * n
    while True:
        r = mpz(rng.randbelow(n2))
        if gmpy2.gcd(r, n) == 1:
            break
    v = r * r % n2
    delta = math.factorial(parties)
    verification = gmpy2.powmod_exp_list(gmpy2.powmod(v, delta, n2), shares, n2)
    root_keys = gmpy2.powmod_exp_list(gmpy2.powmod(v % n, delta, n), root_shares, n)
    pk = ThresholdPublicKey(n, parties=parties, threshold=threshold, v=v,
                            verification_keys=verification,
                            noise_base=make_noise_base(p, q, rng), root_keys=root_keys)
    return pk, [KeyShare(pk, i + 1, s, r) for i, (s, r) in enumerate(zip(shares, root_shares))]


def _shamir(secret: mpz, modulus: mpz, threshold: int, parties: int, rng: Any) -> list[mpz]:
    """f(1) .. f(parties) mod ``modulus`` for f(0) = secret and uniform other coefficients."""
    coeffs = [secret] + [mpz(rng.randbelow(modulus)) for _ in range(threshold - 1)]
    shares = []
    for i in range(1, parties + 1):
        acc = mpz(0)
        for a in reversed(coeffs):                   # Horner
            acc = (acc * i + a) % modulus
        shares.append(acc)
    return shares
