"""The binary codec: values round-trip, and every decoder built on it raises only veil errors
on any byte string, without allocating more than its input (bounded fuzzing)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veil._codec import CHECK_BYTES, DTYPES, Format
from veil.crypto import paillier, psi, serialization
from veil.crypto.sharing import ShamirShare, shamir_share
from veil.errors import CryptoError, ProtocolError, VeilError
from veil.fl.messages import SERVER, Message
from veil.mpc import wire

FMT = Format(b"TEST", 3, name="test frame")
CHECKED = Format(b"TSUM", 1, error=CryptoError, checksum=True, name="test blob")


def test_primitives_round_trip():
    arrays = [(np.arange(6) % 2).astype(dt).reshape(2, 3) for dt in DTYPES]
    out = FMT.writer().u8(7).u16(65535).u32(2 ** 32 - 1).u64(2 ** 64 - 1).f64(-0.5)
    out.blob(b"\x00\xff").text("héllo").big(-(2 ** 300)).big(2 ** 70, signed=False)
    for a in arrays:
        out.array(a)
    reader = FMT.reader(out.finish())
    assert (reader.u8(), reader.u16(), reader.u32(), reader.u64(), reader.f64()) == \
        (7, 65535, 2 ** 32 - 1, 2 ** 64 - 1, -0.5)
    assert (reader.blob(), reader.text(), reader.big(), reader.big(signed=False)) == \
        (b"\x00\xff", "héllo", -(2 ** 300), 2 ** 70)
    for a in arrays:
        back = reader.array()
        assert back.dtype == a.dtype and back.flags.writeable
        np.testing.assert_array_equal(back, a)
    reader.done()


def test_frames_are_checked():
    blob = CHECKED.writer().u32(5).finish()
    assert len(blob) == 5 + 4 + CHECK_BYTES and CHECKED.reader(blob).u32() == 5
    for bad, problem in [(b"XSUM" + blob[4:], "magic"), (blob[:4] + b"\x02" + blob[5:],
                                                         "version 2"),
                         (blob[:6] + b"\x01" + blob[7:], "checksum"), (blob[:8], "magic")]:
        with pytest.raises(CryptoError, match=problem):
            CHECKED.reader(bad)
    reader = FMT.reader(FMT.writer().u32(10).u8(1).finish())
    with pytest.raises(ProtocolError, match="needs 10 more bytes"):
        reader.take(reader.u32())
    with pytest.raises(ProtocolError, match="trailing"):
        FMT.reader(FMT.writer().u8(1).finish()).done()


@pytest.mark.parametrize("body, problem", [
    (b"\x0a\x21" + bytes(8 * 33), "33 dimensions"),                    # too many dims
    (b"\x0a\x02" + (2 ** 20).to_bytes(8, "little") * 2, "more than"),    # product too large
    (b"\x0a\x02" + bytes(8) + (2 ** 63).to_bytes(8, "little"), "more than"),  # 0 x huge
    (b"\x0a\x01" + (2 ** 10).to_bytes(8, "little"), "needs 8192 more"),  # data missing
    (b"\x63\x00", "dtype code 99"),
])
def test_array_bounds_are_checked_before_allocating(body, problem):
    with pytest.raises(ProtocolError, match=problem):
        FMT.reader(b"TEST\x03" + body).array()


def test_big_integers_are_capped():
    data = FMT.writer().big(2 ** 9000).finish()
    with pytest.raises(ProtocolError, match="at most 1024"):
        FMT.reader(data).big(max_bytes=1024)


# -- fuzzing every decoder ------------------------------------------------------------------
_KEY = paillier.keygen(256, insecure_ok=True, rng=1)[0]
_SAMPLES = {
    "message": (Message("p", 3, "fit", 1, SERVER, {"w": np.arange(4.0), "k": {2: b"x"},
                                                   "n": 2 ** 100, "t": [None, True, "s"]})
                .to_bytes(), Message.from_bytes),
    "crypto": (serialization.dumps(_KEY.encrypt(np.arange(3), rng=2)),
               lambda b: serialization.loads(b, public_key=_KEY)),
    "crypto key": (serialization.dumps(_KEY), serialization.loads),
    "share": (shamir_share(np.arange(3), 3, 2, rng=3)[0].to_bytes(), ShamirShare.from_bytes),
    "psi": (psi.PSIReceiver(["a", "b"], rng=4).request(),
            lambda b: psi.PSISender(["a"], max_request=4, rng=5).respond(b)),
    "mpc message": (wire.pack_message(bytes(16), 1, 2, 3, [np.arange(3, dtype=np.uint64)]),
                    wire.unpack_message),
    "mpc instruction": (wire.pack_instruction(1, {"op": "x"}, [np.zeros(2, np.uint8)]),
                        wire.unpack_instruction),
    "mpc arrays": (wire.pack_arrays([np.arange(4, dtype=np.uint64)]), wire.unpack_arrays),
}


def _only_veil_errors(decode, data: bytes) -> None:
    try:
        decode(data)
    except VeilError:
        pass


@st.composite
def _mutated(draw, sample: bytes) -> bytes:
    """A valid frame (or file) with bytes flipped, cut, inserted or replaced by large numbers,
    binary (a length field) or written out (a text header's shape)."""
    data = bytearray(sample)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "huge"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip":
            data[pos] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[pos:pos + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(max_size=16))
        else:
            huge = 2 ** draw(st.integers(31, 63)) - 1
            data[pos:pos + 8] = (huge.to_bytes(8, "little") if draw(st.booleans())
                                 else str(huge).encode()[:8])
    return bytes(data)


@pytest.mark.parametrize("name", sorted(_SAMPLES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_bytes_raise_only_veil_errors(name, data):
    sample, decode = _SAMPLES[name]
    _only_veil_errors(decode, data.draw(st.binary(max_size=64)))
    _only_veil_errors(decode, sample[:5] + data.draw(st.binary(max_size=64)))
    _only_veil_errors(decode, data.draw(_mutated(sample)))


def test_a_magic_or_a_type_tag_given_twice_is_refused():
    """Tag ranges were a convention kept across three files (crypto 1-14, CKKS 40-41,
    encrypted regression 50-53, all under one magic): each format now registers its tags and
    refuses a second kind under one tag, and a second format under one magic."""
    with pytest.raises(ValueError, match="magic b'TEST' is the test frame's already"):
        Format(b"TEST", 1, name="another frame")
    fmt = Format(b"TTAG", 1, name="tagged test frame")
    assert fmt.tag(7, "apples") == 7 and fmt.tag(7, "apples") == 7
    with pytest.raises(ValueError, match="type tag 7 frames apples already"):
        fmt.tag(7, "pears")
    kind, fields = fmt.unframe(fmt.frame(7, [b"a", b""]))
    assert kind == 7 and fields == [b"a", b""]
    with pytest.raises(ValueError, match="not registered"):
        fmt.frame(8, [])
    forged = bytearray(fmt.frame(7, []))
    forged[5] = 8
    with pytest.raises(ProtocolError, match="unknown type tag 8"):
        fmt.unframe(bytes(forged))


def test_he_blobs_have_their_own_magic():
    from veil.crypto.serialization import FORMAT as CRYPTO
    from veil.he.ckks import FORMAT as HE

    assert HE.magic != CRYPTO.magic and set(HE.tags) and set(CRYPTO.tags)
