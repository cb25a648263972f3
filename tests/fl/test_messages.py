"""The wire format: every value round-trips; malformed bytes are ProtocolErrors."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import ProtocolError
from veil.fl.messages import SERVER, Message, decode, encode


def test_every_kind_of_value_round_trips():
    body = {
        "f64": np.linspace(-1, 1, 7), "f32": np.arange(4, dtype=np.float32).reshape(2, 2),
        "u16": np.array([0, 65535], dtype=np.uint16), "i8": np.array([-128, 127], np.int8),
        "bool": np.array([True, False]), "empty": np.zeros((0, 3)),
        "big": 2 ** 2048 + 12345, "neg": -(2 ** 70), "zero": 0, "x": 1.5, "s": "héllo",
        "b": b"\x00\xff", "none": None, "flag": True, "list": [1, [2, b"3"], {"k": 4}],
        "table": {3: b"a", 10: b"b"}, "bigendian": np.arange(3, dtype=">i4"),
    }
    msg = Message("p", 7, "stage", 3, SERVER, body)
    back = Message.from_bytes(msg.to_bytes())
    assert (back.protocol, back.round, back.stage, back.sender, back.recipient) == \
        ("p", 7, "stage", 3, SERVER)
    for key, value in body.items():
        if isinstance(value, np.ndarray):
            assert back.body[key].dtype == value.dtype.newbyteorder("=")
            np.testing.assert_array_equal(back.body[key], value)
        else:
            assert back.body[key] == value
    assert back.to_bytes() == msg.to_bytes()  # deterministic encoding


@pytest.mark.parametrize("data, problem", [
    (b"", "magic"),
    (b"XXXX\x01N", "magic"),
    (b"VMSG\x01N", "version"),
    (b"VMSG\x02Q", "unknown tag"),
    (b"VMSG\x02NN", "trailing"),
    (b"VMSG\x02b\xff\xff\xff\x7f", "more bytes"),                   # length past the end
    (b"VMSG\x02a\x63\x01" + b"\x01" + bytes(7), "dtype code"),        # unknown dtype
    (b"VMSG\x02a\x0a\x01" + (2 ** 60).to_bytes(8, "little"), "more than"),  # huge shape
    (b"VMSG\x02l\xff\xff\xff\xff", "items announced"),            # huge count
    (b"VMSG\x02i\x00\x10\x00\x00" + bytes(4096), "at most 1024"),  # huge integer
    (b"VMSG\x02a\x00\x01\x01" + bytes(7) + b"\x02", "boolean"),      # bool byte 2
    (b"VMSG\x02d\x01\x00\x00\x00fxxxxxxxxN", "mapping key"),          # float key
    (b"VMSG\x02s\x01\x00\x00\x00\xff", "UTF-8"),
])
def test_malformed_bytes_are_protocol_errors(data, problem):
    with pytest.raises(ProtocolError, match=problem):
        decode(data)


def test_envelope_is_checked():
    with pytest.raises(ProtocolError, match="envelope"):
        Message.from_bytes(encode(["p", -1, "s", 0, SERVER, {}]))
    with pytest.raises(ProtocolError, match="6-item"):
        Message.from_bytes(encode(["p", 1, "s"]))
    with pytest.raises(ProtocolError, match="cannot encode"):
        Message("p", 0, "s", 0, SERVER, {"x": object()}).to_bytes()
    with pytest.raises(ProtocolError, match="dtype object"):
        encode(np.array([object()]))


def test_a_huge_integer_is_shown_by_its_size_never_formatted():
    msg = Message.from_bytes(Message("p", 2, "fit", 5, SERVER, {"w": 7 ** 2000}).to_bytes())
    with pytest.raises(ProtocolError, match="'w' is an integer of 5615 bits"):
        msg.integer("w", high=2)
    with pytest.raises(ProtocolError, match="'w' is an integer of 5615 bits"):
        msg.number("w")
    with pytest.raises(ProtocolError, match="envelope field round=an integer of"):
        Message.from_bytes(encode(["p", -(7 ** 2000), "s", 0, SERVER, {}]))
    with pytest.raises(ProtocolError, match="cannot encode an integer of"):
        encode(2 ** 9000)


def test_accessors_name_the_sender_and_the_field():
    msg = Message("p", 2, "fit", 5, SERVER, {"delta": np.array([1.0, np.nan]),
                                             "w": 3, "f": True, "keys": {1: b"k"}})
    with pytest.raises(ProtocolError, match=r"client 5, round 2.*'delta' holds 1 NaN"):
        msg.array("delta", dtype=np.float64, finite=True)
    with pytest.raises(ProtocolError, match=r"'delta' has dtype float64; expected float32"):
        msg.array("delta", dtype=np.float32)
    with pytest.raises(ProtocolError, match=r"'delta' has shape \(2,\); expected \(3,\)"):
        msg.array("delta", dtype=np.float64, shape=(3,))
    with pytest.raises(ProtocolError, match="'missing' is missing"):
        msg.get("missing", int)
    with pytest.raises(ProtocolError, match="'w' is 3; expected an integer in"):
        msg.integer("w", high=2)
    with pytest.raises(ProtocolError, match="'f' has type bool"):
        msg.integer("f")
    with pytest.raises(ProtocolError, match="names client 1"):
        msg.table("keys", allowed={2})
