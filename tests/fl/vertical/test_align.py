"""Private sample alignment: correct rows, nothing outside the intersection, bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.errors import ConfigError, DataError, ProtocolError
from veil.fl.messages import decode, encode
from veil.fl.vertical import AlignGuest, AlignHost, align, read_ids


def _ids(lo, hi):
    return [f"cust-{i:05d}" for i in range(lo, hi)]


def test_two_hosts_align_rows_to_the_same_samples():
    guest = pd.DataFrame({"id": _ids(0, 300)[::-1], "y": np.arange(300)})
    bank = pd.DataFrame({"id": _ids(100, 400), "x": np.arange(100, 400)})
    insurer = pd.DataFrame({"id": _ids(150, 250) + ["other"], "z": [*range(150, 250), -1]})
    out = align(guest, {"bank": bank, "ins": insurer}, column="id", rng=1)
    assert out.size == 100
    assert set(out.ids) == set(_ids(150, 250))
    g = out.take("guest", guest)
    b = out.take("bank", bank)
    i = out.take("ins", insurer)
    assert list(g["id"]) == list(b["id"]) == list(i["id"]) == out.ids
    # the guest's row order is the training order
    assert list(out.rows["guest"]) == sorted(out.rows["guest"])
    assert out.sizes == {"bank": 200, "ins": 100}


def test_hosts_receive_only_common_ids():
    guest_ids, host_ids = _ids(0, 50), _ids(40, 90)
    guest = AlignGuest(guest_ids, ["h"], rng=2)
    host = AlignHost("h", host_ids, rng=3)
    request = guest.request("h", host.setup())
    assert b"cust-" not in request          # only blinded points travel
    guest.finish("h", host.respond(request))
    order = guest.order("h")
    assert decode(order)["ids"] == _ids(40, 50)
    assert list(host.receive_order(order)) == list(range(10))


def test_cardinality_mode_reveals_no_ids():
    out = align(_ids(0, 60), {"h": _ids(30, 100)}, output="cardinality", rng=4)
    assert out.ids is None and out.sizes == {"h": 30} and out.size == 30
    assert out.rows == {}
    host = AlignHost("h", _ids(0, 5), output="cardinality", rng=5)
    with pytest.raises(ProtocolError, match="cardinality"):
        host.receive_order(encode({"stage": "order", "ids": _ids(0, 5)}))


def test_integer_ids_and_read_ids():
    ids, kind = read_ids(pd.Series([3, 1, 2]))
    assert (ids, kind) == (["3", "1", "2"], "int")
    out = align(np.arange(10), {"h": np.arange(5, 20)}, rng=6)
    assert out.ids == [str(i) for i in range(5, 10)]


@pytest.mark.parametrize("guest_ids, host_ids, match", [
    (["1", "2"], [1, 2], "mismatched id types"),
    (["a", "b", "a"], ["a"], "duplicate ids"),
    (["a", None], ["a"], "missing id"),
    (["a", 1], ["a"], "mixes id types"),
    (["a", "b"], ["c", "d"], "intersection of all parties' ids is empty"),
])
def test_bad_ids_are_refused(guest_ids, host_ids, match):
    with pytest.raises(DataError, match=match):
        align(guest_ids, {"h": host_ids}, rng=7)


def test_malformed_and_misrouted_messages_name_the_party():
    guest = AlignGuest(_ids(0, 5), ["h"], rng=8)
    with pytest.raises(ProtocolError, match="'h'"):
        guest.request("h", b"garbage")
    with pytest.raises(ProtocolError, match="unknown host"):
        guest.request("x", AlignHost("x", _ids(0, 5), rng=9).setup())
    host = AlignHost("h", _ids(0, 5), rng=10)
    with pytest.raises(ProtocolError, match="not a 'request'"):
        host.respond(host.setup())
    with pytest.raises(ProtocolError, match="does not hold"):
        host.receive_order(encode({"stage": "order", "ids": ["nope"]}))
    with pytest.raises(ConfigError, match="guest"):
        align(_ids(0, 3), {"guest": _ids(0, 3)})
