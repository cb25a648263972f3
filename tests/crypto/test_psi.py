"""ECDH private set intersection: correct result, nothing but blinded points on the wire."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.crypto import psi
from veil.errors import ConfigError, DataError, ProtocolError

# RFC 9380, appendix J.7.2 (curve25519_XMD:SHA-512_ELL2_NU_): msg -> Q.x = map_to_curve(u).
RFC_DST = b"QUUX-V01-CS02-with-curve25519_XMD:SHA-512_ELL2_NU_"
RFC_VECTORS = {
    b"": "51125222da5e763d97f3c10fcc92ea6860b9ccbbd2eb1285728f566721c1e65b",
    b"abc": "7d56d1e08cb0ccb92baf069c18c49bb5a0dcd927eff8dcf75ca921ef7f3e6eeb",
    b"abcdef0123456789": "3fbe66b9c9883d79e8407150e7c2a1c8680bee496c62fabe4619a72b3cabe90f",
    b"q128_" + b"q" * 128: "227e0bb89de700385d19ec40e857db6e6a3e634b1c32962f370d26f84ff19683",
    b"a512_" + b"a" * 512: "3bcd651ee54d5f7b6013898aab251ee8ecc0688166fce6e9548d38472f6bd196",
}
P = 2**255 - 19


def test_hash_to_curve_matches_rfc9380():
    points = psi.hash_to_curve(list(RFC_VECTORS), RFC_DST)
    for point, expected in zip(points, RFC_VECTORS.values()):
        assert point[::-1].hex() == expected  # RFC prints big-endian integers


def test_hashed_points_are_on_the_curve():
    for point in psi.hash_to_curve([str(i).encode() for i in range(200)]):
        u = int.from_bytes(point, "little")
        assert u < P and pow(u**3 + 486662 * u**2 + u, (P - 1) // 2, P) in (0, 1)


def test_blinding_commutes():
    a, b = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    (h,) = psi.hash_to_curve([b"alice@example.org"])
    ab = a.exchange(X25519PublicKey.from_public_bytes(b.exchange(
        X25519PublicKey.from_public_bytes(h))))
    ba = b.exchange(X25519PublicKey.from_public_bytes(a.exchange(
        X25519PublicKey.from_public_bytes(h))))
    assert ab == ba


@settings(max_examples=15, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=25), st.sets(st.integers(0, 60), max_size=25),
       st.integers(0, 1000))
def test_intersection_equals_set_intersection(xs, ys, seed):
    mine = [f"id-{i}" for i in sorted(xs)]
    theirs = [f"id-{i}" for i in sorted(ys, reverse=True)]
    got = psi.intersect(mine, theirs, rng=seed)
    assert got == [f"id-{i}" for i in sorted(xs & ys)]  # as given, in the receiver's order
    assert psi.intersect(mine, theirs, output="cardinality", rng=seed) == len(xs & ys)


def test_no_identifier_or_hash_on_the_wire():
    mine = [f"patient-{i:05d}" for i in range(0, 300, 2)]
    theirs = [f"patient-{i:05d}" for i in range(0, 300, 3)]
    receiver = psi.PSIReceiver(mine, rng=1)
    sender = psi.PSISender(theirs, max_request=len(mine), rng=2)
    messages = [sender.setup(), receiver.request()]
    messages.append(sender.respond(messages[1]))
    receiver.receive_setup(messages[0])
    common = receiver.finish(messages[2])
    assert common == [f"patient-{i:05d}" for i in range(0, 300, 6)]
    secrets = [x.encode() for x in mine + theirs]
    secrets += psi.hash_to_curve(secrets)                     # unblinded curve points
    secrets += [hashlib.sha256(x.encode()).digest() for x in mine + theirs]
    for message in messages:
        for secret in secrets:
            assert secret not in message
        for prefix in (b"patient", b"patient-0"):
            assert prefix not in message
    # every message is a header plus 32-byte points, one per item
    assert len(messages[0]) - 26 == 32 * len(theirs)
    assert len(messages[1]) - 27 == 32 * len(mine)
    assert len(messages[2]) - 42 == 32 * len(mine)


def test_cardinality_mode_shuffles_the_reply():
    items = [f"x{i}" for i in range(64)]
    receiver = psi.PSIReceiver(items, output="cardinality", rng=3)
    sender = psi.PSISender(items, output="cardinality", rng=4)
    request = receiver.request()
    reply = sender.respond(request)
    receiver.receive_setup(sender.setup())
    assert receiver.finish(reply) == 64
    # with the receiver's key one can recompute b a H(x) in request order; the reply's order
    # must differ (else the receiver would learn which of its items matched)
    sent = [request[27 + 32 * k: 59 + 32 * k] for k in range(64)]
    doubled = [reply[42 + 32 * k: 74 + 32 * k] for k in range(64)]
    again = [sender._key.exchange(X25519PublicKey.from_public_bytes(p)) for p in sent]
    assert sorted(again) == sorted(doubled) and again != doubled


def test_protocol_errors():
    receiver = psi.PSIReceiver(["a", "b"], rng=5)
    sender = psi.PSISender(["b", "c"], rng=6)
    other = psi.PSISender(["b"], rng=7)
    request = receiver.request()
    with pytest.raises(ProtocolError, match="already called"):
        receiver.request()
    with pytest.raises(ProtocolError, match="output="):
        psi.PSISender(["b"], output="cardinality").respond(request)
    with pytest.raises(ProtocolError, match="malformed PSI message: needs"):
        sender.respond(request[:-1])
    with pytest.raises(ProtocolError, match="not a PSI request"):
        sender.respond(sender.setup())
    reply = sender.respond(request)
    with pytest.raises(ProtocolError, match="single-use"):
        sender.respond(request)
    with pytest.raises(ProtocolError, match="receive_setup"):
        receiver.finish(reply)
    receiver.receive_setup(other.setup())
    with pytest.raises(ProtocolError, match="another session or sender"):
        receiver.finish(reply)
    with pytest.raises(DataError, match="str or bytes"):
        psi.PSIReceiver([1, 2])


def test_a_receiver_cannot_ask_for_the_whole_id_space():
    """Attack (issue 29, item 6): the sender holds 500 patient numbers of an id space of
    2,000; a receiver that asks about every possible id learned all 500. The sender now
    serves at most ``max_request`` identifiers (default: twice its own set size) and
    refuses a larger request by the receiver's name before multiplying any point; a
    receiver within the cap learns membership only of what it asked."""
    space = [f"p{i:04d}" for i in range(2000)]
    held = space[::4]
    greedy = psi.PSIReceiver(space, rng=8)
    sender = psi.PSISender(held, rng=9)
    assert sender.max_request == 2 * len(held)
    greedy.receive_setup(sender.setup())
    with pytest.raises(ProtocolError, match="hospital-b asks about 2000 identifiers.*"
                                            "max_request=1000"):
        sender.respond(greedy.request(), receiver="hospital-b")
    probe = psi.PSIReceiver(space[:500], rng=10)
    probe.receive_setup(sender.setup())
    learned = probe.finish(sender.respond(probe.request()))
    assert learned == space[:500:4] and len(learned) == 125   # a quarter of the set, no more
    wider = psi.PSISender(held, max_request=2000, rng=11)     # a receiver known to hold more
    greedy = psi.PSIReceiver(space, rng=12)
    greedy.receive_setup(wider.setup())
    assert greedy.finish(wider.respond(greedy.request())) == held
    with pytest.raises(ConfigError, match="max_request=0"):
        psi.PSISender(held, max_request=0)
