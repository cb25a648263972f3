"""Correlated randomness: a trusted dealer for n parties, or Paillier triples for two.

What the protocols of :mod:`veil.mpc.party` consume (``[v]`` = additive shares mod 2^64,
``<v>`` = XOR shares of 64-bit words):

==========  ===========================================  ================================
item        content                                      used by
==========  ===========================================  ================================
``mul``     ``[a], [b], [a * b]`` (numpy broadcasting)   Beaver multiplication
``matmul``  ``[A], [B], [A @ B]``                        matrix Beaver multiplication
``and``     ``<a>, <b>, <a & b>``                        AND gates of the comparison
``edabit``  ``[r]`` and ``<r>`` (the same r)             comparison (mask and its bits)
``dabit``   ``<u>`` and ``[u]`` for a random bit u       boolean -> arithmetic conversion
``trunc``   ``[r], [r >> d], [msb(r)]`` (logical shift)  truncation of products
==========  ===========================================  ================================

**Trusted dealer** (:class:`Dealer`). *Assumption*: a third party that never colludes with
any computing party and never sees their messages generates all of the above (Beaver,
CRYPTO 1991). It is an explicit role: the :class:`~veil.mpc.Session` that drives the
computation plays it and keeps its keys away from the parties. To save bandwidth the dealer
gives party i a 256-bit seed once; party i expands every component it needs with a PRG
(AES-256-CTR, :class:`veil.random.Generator` keyed by the secret seed, the instruction
number and the item) and only party 0's derived components (e.g.
``c_0 = ab - sum_{i>0} c_i``) travel with each instruction: one array per item (two for
``trunc``), like the "seeded" dealers of SPDZ-style preprocessing.

**Dealer-free, two parties** (:class:`PaillierTriples`). For ``mul``/``matmul`` items: each
party draws its own ``a_i, b_i``; then ``ab = a_0 b_0 + a_1 b_1 + (a_0 b_1 + a_1 b_0)`` and the
cross term is computed under party 0's Paillier key (Gilboa 1999; the "HE-based" triple
generation of SecureML, Mohassel & Zhang 2017, section 4.2): party 0 sends ``E(a_0), E(b_0)``,
party 1 returns ``E(a_0) b_1 + E(b_0) a_1 + E(r)`` with fresh encryption noise and r uniform in
``[0, 2^(128 + log2(2k) + 40))`` (k the inner dimension), which hides the cross term up to
statistical distance 2^-40; party 0 decrypts ``v = cross + r`` over the integers (the key is
large enough that nothing wraps) and takes ``c_0 = a_0 b_0 + v``, party 1 ``c_1 = a_1 b_1 - r``
(mod 2^64). Semi-honest security rests on Paillier's IND-CPA security (DCR). Only
multiplication triples are made this way; comparisons need the dealer.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from veil.errors import ConfigError, ProtocolError
from veil.random import Generator as PRG
from veil.random import check_rng

__all__ = ["Dealer", "DealerShares", "PaillierTriples", "Exchange", "item_shapes", "matmul_shape"]

_STAT_BITS = 40
_ADD, _XOR = "add", "xor"


class Exchange:
    """One communication round: arrays to send to each party, and the shapes/dtypes
    expected from each party (the engine validates them on receipt)."""

    __slots__ = ("sends", "expect")

    def __init__(self, sends: dict[int, list[np.ndarray]],
                 expect: dict[int, list[tuple[tuple[int, ...], Any]]]) -> None:
        self.sends = sends
        self.expect = expect


def matmul_shape(sa: tuple, sb: tuple) -> tuple:
    """The shape of ``a @ b`` under numpy's rules (ValueError when they do not match)."""
    if not sa or not sb:
        raise ValueError("matmul needs operands with at least one dimension")
    a = sa if len(sa) > 1 else (1, *sa)
    b = sb if len(sb) > 1 else (*sb, 1)
    if a[-1] != b[-2]:
        raise ValueError(f"inner dimensions differ ({a[-1]} and {b[-2]})")
    out = (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])
    if len(sb) == 1:
        out = out[:-1]
    if len(sa) == 1:
        out = out[:-2] + out[-1:] if len(sb) > 1 else out[:-1]
    return out


def _result_shape(kind: str, sa: tuple, sb: tuple) -> tuple:
    return np.broadcast_shapes(sa, sb) if kind == "mul" else matmul_shape(sa, sb)


def item_shapes(item: Sequence) -> tuple[list[tuple[str, tuple, str]],
                                          list[tuple[str, tuple, str]]]:
    """(free components, corrected components) of an item: (name, shape, combination).

    Every party expands the free components from its seed; party 0 receives the corrected
    ones from the dealer, the other parties expand theirs.
    """
    kind = item[0]
    if kind in ("mul", "matmul"):
        sa, sb = tuple(item[1]), tuple(item[2])
        return [("a", sa, _ADD), ("b", sb, _ADD)], [("c", _result_shape(kind, sa, sb), _ADD)]
    s = tuple(item[1])
    if kind == "and":
        return [("a", s, _XOR), ("b", s, _XOR)], [("c", s, _XOR)]
    if kind == "edabit":
        return [("r", s, _ADD)], [("bits", s, _XOR)]
    if kind == "dabit":
        return [("u", s, _XOR)], [("arith", s, _ADD)]
    if kind == "trunc":
        return [("r", s, _ADD)], [("shifted", s, _ADD), ("msb", s, _ADD)]
    raise ProtocolError(f"unknown correlated item {kind!r}")


def _secrets(item: Sequence, totals: list[np.ndarray]) -> list[np.ndarray]:
    """The values the corrected components share, from the totals of the free ones."""
    kind = item[0]
    if kind in ("mul", "matmul"):
        return [_product(kind, totals[0], totals[1])]
    if kind == "and":
        return [totals[0] & totals[1]]
    if kind in ("edabit", "dabit"):
        return [totals[0]]
    r = totals[0]  # trunc: r >> d (logical shift) and the top bit of r
    return [r >> np.uint64(item[2]), r >> np.uint64(63)]


def _combine(values: list[np.ndarray], how: str) -> np.ndarray:
    total = values[0]
    for v in values[1:]:
        total = total + v if how == _ADD else total ^ v
    return np.asarray(total, dtype=np.uint64)


def _expand(seed: bytes, seq: int, k: int, c: int, shape: tuple, kind: str) -> np.ndarray:
    words = np.asarray(PRG(seed + struct.pack("<QHB", seq, k, c)).random_raw(shape),
                       dtype=np.uint64)
    return words & np.uint64(1) if kind == "dabit" and c == 0 else words


class Dealer:
    """The trusted dealer: holds every party's seed and makes party 0's corrections."""

    def __init__(self, parties: int, *, rng=None) -> None:
        rng = check_rng(rng)
        self.parties = parties
        self.seeds = [rng.bytes(32) for _ in range(parties)]

    def deal(self, seq: int, items: Sequence[Sequence]) -> list[np.ndarray]:
        """Party 0's corrected component for each item (the others expand their seeds)."""
        with np.errstate(over="ignore"):  # ring arithmetic wraps on purpose
            return self._deal(seq, items)

    def _deal(self, seq: int, items: Sequence[Sequence]) -> list[np.ndarray]:
        out = []
        for k, item in enumerate(items):
            free, corrected = item_shapes(item)
            totals = [_combine([_expand(s, seq, k, c, fs, item[0]) for s in self.seeds], fh)
                      for c, (_, fs, fh) in enumerate(free)]
            for c, ((_, shape, how), target) in enumerate(zip(corrected, _secrets(item, totals)),
                                                          start=len(free)):
                others = [_expand(s, seq, k, c, shape, item[0]) for s in self.seeds[1:]]
                out.append(_combine([target, *others], how) if how == _XOR
                           else np.asarray(target - _combine(others, _ADD), dtype=np.uint64))
        return out


class DealerShares:
    """A party's view of the dealer: its seed, expanded per instruction and item."""

    kind = "dealer"

    def __init__(self, index: int, seed: bytes) -> None:
        self.index = index
        self.seed = seed

    def fetch(self, seq: int, items: Sequence[Sequence], payload: list[np.ndarray]
              ) -> Generator[Exchange, Any, list[tuple[np.ndarray, ...]]]:
        layout = [item_shapes(item) for item in items]
        wanted = sum(len(corrected) for _, corrected in layout)
        if self.index == 0 and len(payload) != wanted:
            raise ProtocolError(f"the dealer sent {len(payload)} arrays; {wanted} expected")
        out, given = [], iter(payload)
        for k, (item, (free, corrected)) in enumerate(zip(items, layout)):
            parts = [_expand(self.seed, seq, k, c, fs, item[0]) for c, (_, fs, _) in
                     enumerate(free)]
            for c, (_, shape, _) in enumerate(corrected, start=len(free)):
                if self.index == 0:
                    part = next(given)
                    if part.shape != shape or part.dtype != np.uint64:
                        raise ProtocolError(f"the dealer's array for item {k} has shape "
                                            f"{part.shape}; expected {shape}")
                else:
                    part = _expand(self.seed, seq, k, c, shape, item[0])
                parts.append(part)
            out.append(tuple(parts))
        return out
        yield  # a generator that never exchanges messages


def _to_bytes(values: np.ndarray, width: int) -> np.ndarray:
    flat = [int(v).to_bytes(width, "little") for v in values.ravel().tolist()]
    return np.frombuffer(b"".join(flat), dtype=np.uint8).reshape(len(flat), width)


def _from_bytes(raw: np.ndarray, shape: tuple) -> np.ndarray:
    out = np.empty(raw.shape[0], dtype=object)
    out[:] = [int.from_bytes(row.tobytes(), "little") for row in raw]
    return out.reshape(shape)


class PaillierTriples:
    """Dealer-free multiplication triples for two parties under party 0's Paillier key."""

    kind = "paillier"

    def __init__(self, index: int, *, bits: int = 2048, insecure_ok: bool = False,
                 rng=None) -> None:
        self.index = index
        self.bits = bits
        self.insecure_ok = insecure_ok
        self._rng = check_rng(rng)
        self._pk = None
        self._sk = None

    @property
    def _width(self) -> int:
        return (2 * self.bits + 7) // 8

    def setup(self) -> Generator[Exchange, Any, None]:
        """Party 0 makes the key pair and sends the modulus to party 1."""
        from veil.crypto import paillier

        if self.index == 0:
            self._pk, self._sk = paillier.keygen(self.bits, insecure_ok=self.insecure_ok,
                                                 rng=self._rng)
            yield Exchange({1: [_to_bytes(np.array([int(self._pk.n)], dtype=object),
                                          self._width // 2)]}, {})
        else:
            inbox = yield Exchange({}, {0: [((1, self._width // 2), np.uint8)]})
            self._pk = paillier.PublicKey(int(_from_bytes(inbox[0][0], (1,))[0]))
            if self._pk.bits < self.bits - 1:
                raise ProtocolError(f"party 0's Paillier modulus has {self._pk.bits} bits; "
                                    f"{self.bits} were agreed")

    def fetch(self, seq: int, items: Sequence[Sequence], payload: list[np.ndarray]
              ) -> Generator[Exchange, Any, list[tuple[np.ndarray, ...]]]:
        from veil.crypto import paillier

        if self._pk is None:
            raise ProtocolError("Paillier triples need the key set-up first")
        for item in items:
            if item[0] not in ("mul", "matmul"):
                raise ProtocolError(f"dealer-free preprocessing makes multiplication triples "
                                    f"only, not {item[0]!r}")
        shares = []
        for item in items:
            free, [(_, sc, _)] = item_shapes(item)
            a, b = (np.asarray(self._rng.random_raw(fs), dtype=np.uint64) for _, fs, _ in free)
            shares.append((a, b, sc))
        width = self._width
        if self.index == 0:
            sends = []
            for a, b, _ in shares:
                sends += [_to_bytes(_raw(self._pk.encrypt(v.astype(object), rng=self._rng)),
                                    width) for v in (a, b)]
            yield Exchange({1: sends}, {})
            inbox = yield Exchange({}, {1: [((int(np.prod(sc)), width), np.uint8)
                                            for _, _, sc in shares]})
            out = []
            for item, (a, b, sc), raw in zip(items, shares, inbox[1]):
                v = self._sk.decrypt(paillier.EncryptedArray(self._pk, _from_bytes(raw, sc)))
                out.append((a, b, _product(item[0], a, b) + _mod64(np.ravel(v), sc)))
            return out
        expect = [((int(np.prod(v.shape)), width), np.uint8) for a, b, _ in shares
                  for v in (a, b)]
        inbox = yield Exchange({}, {0: expect})
        sends, out = [], []
        for k, (item, (a, b, sc)) in enumerate(zip(items, shares)):
            ea = paillier.EncryptedArray(self._pk, _from_bytes(inbox[0][2 * k], a.shape))
            eb = paillier.EncryptedArray(self._pk, _from_bytes(inbox[0][2 * k + 1], b.shape))
            inner = a.shape[-1] if item[0] == "matmul" and a.ndim else 1
            bound = 2 ** (128 + int(np.ceil(np.log2(2 * inner))) + _STAT_BITS)
            if self._pk.bits < bound.bit_length() + 2:
                raise ConfigError(f"paillier_bits={self._pk.bits} is too small to mask "
                                  f"{bound.bit_length()}-bit cross terms; use more bits")
            r = np.empty(int(np.prod(sc)), dtype=object)
            r[:] = [self._rng.randbelow(bound) for _ in range(r.size)]
            r = r.reshape(sc)
            if item[0] == "mul":
                cross = ea * b.astype(object) + eb * a.astype(object)
            else:
                cross = ea @ b.astype(object) + a.astype(object) @ eb
            cross = cross + self._pk.encrypt(r, rng=self._rng)  # fresh noise hides a, b
            sends.append(_to_bytes(_raw(cross), width))
            out.append((a, b, _product(item[0], a, b) - _mod64(r.ravel(), sc)))
        yield Exchange({0: sends}, {})
        return out


def _raw(c: Any) -> np.ndarray:
    """The ciphertexts of an EncryptedArray or EncryptedNumber as an object array."""
    return np.asarray(c.ciphertexts if hasattr(c, "ciphertexts") else [c.ciphertext],
                      dtype=object)


def _product(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a * b if kind == "mul" else np.matmul(a, b)


def _mod64(values: np.ndarray, shape: tuple) -> np.ndarray:
    """Python integers reduced mod 2^64, as a uint64 array of ``shape``."""
    return np.array([int(x) % 2**64 for x in values.tolist()], dtype=np.uint64).reshape(shape)
