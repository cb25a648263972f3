"""Private set intersection by commutative Diffie-Hellman on Curve25519 (ECDH-PSI).

Protocol (Meadows 1986; Huberman, Franklin & Hogg 1999; analysed by De Cristofaro &
Tsudik 2010). The receiver R holds a set X and learns the intersection (or only its size);
the sender S holds Y and learns only |X|. With H a hash onto the curve and a, b secret
scalars:

1. setup, S -> R: ``{b H(y) : y in Y}`` in a random order (it can be sent at any time);
2. request, R -> S: ``{a H(x) : x in X}`` in a random order;
3. response, S -> R: ``{b (a H(x))}`` in the request's order (shuffled when only the
   cardinality is released). R computes ``{a (b H(y))}``; ``x`` is in the intersection iff
   ``b a H(x)`` is in that set, because scalar multiplication commutes: ``a b P = b a P``.

Each party does 2 scalar multiplications per item of the larger set; the two parties work
in parallel when they run on two machines (R blinds its set while S blinds its own, then
each applies its key to the other's points).

Security: semi-honest parties, the decisional Diffie-Hellman assumption on Curve25519's
prime-order subgroup, with H a random oracle. Every point on the wire is blinded by a
secret scalar; no identifier and no unblinded hash ever leaves a party. The receiver also
learns |Y| and the sender |X| (pad the sets with random dummies to hide them).

What a receiver may ask is bounded by the sender. A request is a set of probes: each point
``a H(x)`` asks "is x in Y?", and nothing lets the sender tell a real identifier from a
guess. A receiver that asked about every identifier of a small id space (patient numbers,
dates of birth) would learn all of Y. The sender therefore fixes the largest request it
serves, ``max_request``, and refuses a larger one with a
:class:`~veil.errors.ProtocolError` naming the receiver, before it multiplies a single
point. The default is :data:`REQUEST_FACTOR` |Y| = 2 |Y|, twice its own set's size: an
honest receiver's set may be somewhat larger (a feature holder of a vertical federation
may hold fewer rows than the label holder asking it); set it to the receiver's declared set
size where that is known, and lower it for a small id space. A receiver of any kind
therefore learns, per request, membership in Y of at most ``max_request`` identifiers of
its choice, and the sender answers one request per key. Against an **untrusted receiver**
this is the whole guarantee: size ``max_request`` to the receiver's declared set, and keep
the id space large (or the identifiers salted with a secret both honest parties share) so
that probes are worth little.

The cardinality-only mode is **semi-honest only for the receiver**: the sender cannot check
that the receiver blinded every item with the same scalar a (the points H(x) are private,
so no proof of equal discrete logarithms can be given without revealing them). A receiver
that blinds item i with its own a_i can strip each shuffled response point with every
a_i^-1 until one lands on a setup point b H(y), and so learns *which* items intersect,
not only how many (O(|X|^2) scalar multiplications). Use it only where the receiver is
trusted to follow the protocol: against an untrusted receiver it gives no more than the
intersection mode does (membership of at most ``max_request`` probes), so it is no
defence there; release nothing, or compute the size inside :mod:`veil.mpc`.

Group and hash. Scalar multiplication is X25519 (RFC 7748) from ``cryptography``:
``X25519(k, u)`` is the u-coordinate of ``clamp(k) P`` where P is either point with
u-coordinate u; the clamped scalar is a multiple of the cofactor 8, so the result lies in
the prime-order subgroup, and ``X25519(a, X25519(b, u)) = X25519(b, X25519(a, u))``.
H must land on the curve with an unknown discrete logarithm: hashing to a scalar h and
using ``h G`` would let the sender strip the receiver's key (``h^-1 a h G = a G``) and test
any guess offline. H is therefore RFC 9380's ``curve25519_XMD:SHA-512_ELL2_NU_`` encoding:
``u = hash_to_field(msg)`` with ``expand_message_xmd`` (SHA-512, 48 bytes, so the bias of
``u mod p`` is below 2^-128), then the Elligator 2 map (Bernstein, Hamburg, Krasnova &
Lange 2013) ``x1 = -A / (1 + 2 u^2)``, keeping ``x1`` if ``x1^3 + A x1^2 + x1`` is a square
and ``-x1 - A`` otherwise (A = 486662); cofactor clearing is done by X25519's clamping.
The map is checked against RFC 9380's test vectors (appendix J.7.2) in the tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import gmpy2
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from veil._codec import Format
from veil._validation import check_choice, check_int
from veil.errors import CryptoError, DataError, ProtocolError
from veil.random import check_rng

__all__ = ["hash_to_curve", "PSIReceiver", "PSISender", "intersect", "DST", "REQUEST_FACTOR"]

DST = b"VEIL-PSI-V01-curve25519_XMD:SHA-512_ELL2_NU_"
_P = gmpy2.mpz(2**255 - 19)
_A = gmpy2.mpz(486662)
_POINT = 32
#: the wire format of the PSI messages: a kind byte, its header fields, the points (a blob)
FORMAT = Format(b"VPSI", 2, name="PSI message")
_OUTPUTS = ("intersection", "cardinality")
#: a sender serves, by default, requests of up to this many times its own set size
REQUEST_FACTOR = 2
#: each message's kind byte and header fields (bytes of each)
_LAYOUTS = {"setup": (b"S", (16,)),          # sender id
            "request": (b"Q", (1, 16)),      # output mode, receiver session
            "response": (b"R", (16, 16))}    # receiver session, sender id


def _xmd_prefix(dst: bytes) -> tuple[object, bytes, bytes]:
    """expand_message_xmd (RFC 9380 section 5.3.1) pieces for SHA-512 and 48 output bytes."""
    if not 0 < len(dst) <= 255:
        raise DataError(f"dst has {len(dst)} bytes; RFC 9380 allows 1 to 255")
    dst_prime = dst + bytes([len(dst)])
    start = hashlib.sha512(bytes(128))           # Z_pad: one SHA-512 block of zeros
    return start, b"\x00\x30\x00" + dst_prime, b"\x01" + dst_prime  # l_i_b_str = 48


def hash_to_curve(items: Iterable[bytes], dst: bytes = DST) -> list[bytes]:
    """RFC 9380 ``encode_to_curve`` onto Curve25519 before cofactor clearing: for each item
    the 32-byte little-endian u-coordinate of ``map_to_curve_elligator2(hash_to_field(item))``.
    """
    start, tail0, tail1 = _xmd_prefix(dst)
    sha512, mpz, invert, legendre = hashlib.sha512, gmpy2.mpz, gmpy2.invert, gmpy2.legendre
    p, a, minus_a = _P, _A, _P - _A
    out = []
    for msg in items:
        h = start.copy()
        h.update(msg + tail0)
        u = mpz(int.from_bytes(sha512(h.digest() + tail1).digest()[:48], "big"))
        # 1 + 2 u^2 is never 0: -1/2 is not a square mod p (p = 5 mod 8), so inv0 = invert
        x = minus_a * invert(1 + 2 * u * u, p) % p or minus_a
        if legendre(x * (x * (x + a) + 1), p) < 0:    # g(x) = x^3 + A x^2 + x
            x = (minus_a - x) % p                     # -x - A
        out.append(x.to_bytes(_POINT, "little"))
    return out


def _encode(items: Iterable[bytes | str], name: str) -> dict[bytes, bytes | str]:
    """Identifiers as bytes (str as UTF-8) -> the item as given; the first of equal ones."""
    seen: dict[bytes, bytes | str] = {}
    for i, item in enumerate(items):
        if isinstance(item, str):
            key = item.encode()
        elif isinstance(item, (bytes, bytearray)):
            key = item = bytes(item)
        else:
            raise DataError(f"{name}[{i}] is a {type(item).__name__}; identifiers must be "
                            "str or bytes")
        seen.setdefault(key, item)
    return seen


def _multiply(key: X25519PrivateKey, points: list[bytes]) -> list[bytes]:
    try:
        return [key.exchange(X25519PublicKey.from_public_bytes(p)) for p in points]
    except ValueError as exc:  # an all-zero result: a point of small order was received
        raise CryptoError(f"a received point has small order: {exc}") from None


def _new_key(rng) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(rng.bytes(32))


def _shuffle(points: list[bytes], rng) -> tuple[list[bytes], list[int]]:
    """The points in a uniformly random order, and ``order[k]`` = the index now at k."""
    order = [int(i) for i in rng.permutation(len(points))] if points else []
    return [points[i] for i in order], order


def _pack(what: str, fields: tuple[bytes, ...], points: list[bytes]) -> bytes:
    out = FORMAT.writer().raw(_LAYOUTS[what][0])
    for f in fields:
        out.raw(f)
    return out.blob(b"".join(points)).finish()


def _unpack(message: bytes, what: str) -> tuple[tuple[bytes, ...], list[bytes]]:
    """Header fields of a PSI message, and its points; a malformed message is refused."""
    kind, sizes = _LAYOUTS[what]
    reader = FORMAT.reader(message)
    if bytes(reader.take(1)) != kind:
        raise reader.fail(f"this message is not a PSI {what} (wrong kind)")
    fields = tuple(bytes(reader.take(n)) for n in sizes)
    raw = reader.blob()
    reader.done()
    if len(raw) % _POINT:
        raise reader.fail(f"{len(raw)} bytes of points, not a multiple of {_POINT}")
    return fields, [raw[i:i + _POINT] for i in range(0, len(raw), _POINT)]


class PSIReceiver:
    """The party that learns the intersection (``output="intersection"``) or only its size.

    Sans-I/O: :meth:`request` returns the message for the sender; :meth:`receive_setup`
    takes the sender's set message (it may arrive before or after the request is sent);
    :meth:`finish` takes the sender's response and returns the result: the common items
    (as given, in the receiver's input order; str items are hashed as UTF-8) or their
    number.
    """

    def __init__(self, items: Iterable[bytes | str], *, output: str = "intersection",
                 rng=None) -> None:
        self.output = check_choice(output, "output", _OUTPUTS)
        given = _encode(items, "items")
        self._items, self._given = list(given), list(given.values())
        self._rng = check_rng(rng)
        self._key = _new_key(self._rng)
        self._session = self._rng.bytes(16)
        self._order: list[int] | None = None   # set by request()
        self._theirs: set[bytes] | None = None  # a b H(y), set by receive_setup()
        self._sender: bytes | None = None
        self._done = False

    def request(self) -> bytes:
        """The receiver's blinded points ``a H(x)`` in a random order."""
        if self._order is not None:
            raise ProtocolError("request() was already called: one request per receiver")
        points, self._order = _shuffle(_multiply(self._key, hash_to_curve(self._items)),
                                       self._rng)
        return _pack("request", (bytes([_OUTPUTS.index(self.output)]), self._session), points)

    def receive_setup(self, setup: bytes) -> None:
        """Take the sender's ``b H(y)`` and compute ``a b H(y)``."""
        if self._theirs is not None:
            raise ProtocolError("a setup message was already received")
        (sender,), points = _unpack(setup, "setup")
        self._theirs = set(_multiply(self._key, points))
        self._sender = sender

    def finish(self, response: bytes) -> list[bytes | str] | int:
        """The intersection (the receiver's items as given, in input order) or its size."""
        if self._order is None or self._theirs is None or self._done:
            raise ProtocolError("finish() needs one request() and one receive_setup() first")
        (session, sender), doubled = _unpack(response, "response")
        if session != self._session or sender != self._sender:
            raise ProtocolError("the PSI response belongs to another session or sender")
        if len(doubled) != len(self._order):
            raise ProtocolError(f"the PSI response has {len(doubled)} points for the "
                                f"{len(self._order)} requested")
        self._done = True
        if self.output == "cardinality":
            return sum(p in self._theirs for p in doubled)
        hits = sorted(self._order[k] for k, p in enumerate(doubled) if p in self._theirs)
        return [self._given[i] for i in hits]


class PSISender:
    """The party that answers a :class:`PSIReceiver`; it learns only the receiver's set size.

    Sans-I/O: :meth:`setup` returns its blinded set (send it any time), :meth:`respond`
    answers the receiver's request. ``output`` must be the mode agreed with the receiver: a
    request for another mode is refused (for ``"cardinality"`` the reply is shuffled).
    ``max_request`` is the largest request served (module docstring; default
    ``REQUEST_FACTOR`` times the size of this sender's own set, at least 1).
    """

    def __init__(self, items: Iterable[bytes | str], *, output: str = "intersection",
                 max_request: int | None = None, rng=None) -> None:
        self.output = check_choice(output, "output", _OUTPUTS)
        self._items = list(_encode(items, "items"))
        self.max_request = (max(1, REQUEST_FACTOR * len(self._items)) if max_request is None
                            else check_int(max_request, "max_request", low=1))
        self._rng = check_rng(rng)
        self._key = _new_key(self._rng)
        self._id = self._rng.bytes(16)
        self._answered = False

    def setup(self) -> bytes:
        """The sender's blinded points ``b H(y)`` in a random order."""
        points = _shuffle(_multiply(self._key, hash_to_curve(self._items)), self._rng)[0]
        return _pack("setup", (self._id,), points)

    def respond(self, request: bytes, *, receiver: str = "the receiver") -> bytes:
        """``b a H(x)`` for the receiver's points, in their order (shuffled for cardinality);
        a request of more than ``max_request`` points is refused, naming ``receiver``."""
        if self._answered:
            raise ProtocolError("this sender already answered a request (keys are single-use)")
        (mode_b, session), points = _unpack(request, "request")
        mode = mode_b[0]
        if mode >= len(_OUTPUTS) or _OUTPUTS[mode] != self.output:
            allowed = _OUTPUTS[mode] if mode < len(_OUTPUTS) else mode
            raise ProtocolError(f"{receiver} asks for output={allowed!r}; this sender "
                                f"agreed to output={self.output!r}")
        if len(points) > self.max_request:
            raise ProtocolError(f"{receiver} asks about {len(points)} identifiers; this sender "
                                f"serves at most max_request={self.max_request} (by default "
                                f"{REQUEST_FACTOR} times the size of its own set)")
        doubled = _multiply(self._key, points)
        if self.output == "cardinality":
            doubled = _shuffle(doubled, self._rng)[0]
        self._answered = True
        return _pack("response", (session, self._id), doubled)


def intersect(receiver_items: Iterable[bytes | str], sender_items: Iterable[bytes | str], *,
              output: str = "intersection", rng=None) -> list[bytes | str] | int:
    """Run both parties in this process (tests, benchmarks, single-machine use): the caller
    holds both sets, so the sender serves a request of the receiver's full size."""
    rng = check_rng(rng)
    r_rng, s_rng = rng.spawn(2)
    receiver = PSIReceiver(receiver_items, output=output, rng=r_rng)
    sender = PSISender(sender_items, output=output, max_request=max(1, len(receiver._items)),
                       rng=s_rng)
    receiver.receive_setup(sender.setup())
    return receiver.finish(sender.respond(receiver.request()))
