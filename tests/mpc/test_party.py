"""The sans-I/O party: messages are validated (session, sender, step, shape), early ones kept."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import ProtocolError
from veil.mpc.party import DRIVER, Party
from veil.mpc.triples import Dealer, DealerShares
from veil.mpc.wire import pack_instruction, pack_message, unpack_arrays, unpack_message

SESSION = bytes(range(16))


def _parties(n=2, session=SESSION):
    dealer = Dealer(n, rng=0)
    return [Party(i, n, session, DealerShares(i, dealer.seeds[i]), rng=i) for i in range(n)]


def _input(parties, seq, owner, value):
    """Run an input instruction by hand; returns the messages in flight."""
    enc = np.asarray(value, dtype=np.uint64)
    out = []
    for p in parties:
        arrays = [enc] if p.index == owner else []
        op = {"op": "input", "out": seq, "args": [], "owner": owner, "shape": list(enc.shape)}
        out += [(p.index, d, m) for d, m in p.begin(pack_instruction(seq, op, arrays))]
    return out


def _deliver(parties, msgs):
    results = {}
    while msgs:
        src, dest, msg = msgs.pop(0)
        if dest == DRIVER:
            results[src] = unpack_arrays(msg)
        else:
            msgs += [(dest, d, m) for d, m in parties[dest].receive(src, msg)]
    return results


def test_input_and_reveal_by_hand():
    parties = _parties(3)
    _deliver(parties, _input(parties, 1, 2, [5, 7, 9]))
    shares = [p.store[1] for p in parties]
    assert (shares[0] + shares[1] + shares[2]).tolist() == [5, 7, 9]
    assert not np.array_equal(shares[2], [5, 7, 9])  # the owner keeps a masked share
    op = {"op": "reveal", "out": 0, "args": [1], "to": 1}
    msgs = [(p.index, d, m) for p in parties for d, m in p.begin(pack_instruction(2, op))]
    results = _deliver(parties, msgs)
    assert list(results) == [1] and results[1][0].tolist() == [5, 7, 9]


def test_messages_are_validated():
    parties = _parties(2)
    msgs = _input(parties, 1, 0, [1, 2])
    (_, _, msg), = msgs  # the owner's seed message to party 1
    session, sender, seq, step, arrays = unpack_message(msg)
    assert (session, sender, seq, step) == (SESSION, 0, 1, 1)
    with pytest.raises(ProtocolError, match="another session"):
        parties[1].receive(0, pack_message(bytes(16), 0, seq, step, arrays))
    with pytest.raises(ProtocolError, match="claims to come from"):
        parties[1].receive(0, pack_message(SESSION, 1, seq, step, arrays))
    with pytest.raises(ProtocolError, match="senders are 0..1"):
        parties[1].receive(5, msg)
    with pytest.raises(ProtocolError, match="expected"):
        parties[1].receive(0, pack_message(SESSION, 0, seq, step, [np.zeros(31, np.uint8)]))
    with pytest.raises(ProtocolError, match="malformed"):
        parties[1].receive(0, msg[:-5])
    parties[1].receive(0, msg)
    assert not parties[1].busy
    with pytest.raises(ProtocolError, match="replayed"):
        parties[1].receive(0, msg)


def test_instructions_are_validated():
    parties = _parties(2)
    op = {"op": "stats", "out": 0, "args": []}
    with pytest.raises(ProtocolError, match="expected instruction 1, got 3"):
        parties[0].begin(pack_instruction(3, op))
    with pytest.raises(ProtocolError, match="unknown instruction"):
        parties[0].begin(pack_instruction(1, {"op": "launch", "args": []}))
    with pytest.raises(ProtocolError, match="no tensor #99"):
        parties[0].begin(pack_instruction(2, {"op": "linear", "out": 1, "args": [99],
                                              "coefs": [1]}))
    with pytest.raises(ProtocolError, match="malformed MPC instruction"):
        parties[0].begin(b"VINS\x01" + bytes(4))


def test_early_messages_wait_for_their_step():
    parties = _parties(2)
    msgs = _input(parties, 1, 0, [3])
    # party 1 gets the message before it even starts the instruction
    (_, _, msg), = [m for m in msgs if m[1] == 1]
    fresh = _parties(2)
    fresh[1].receive(0, msg)
    assert not fresh[1].busy and 1 not in fresh[1].store
    op = {"op": "input", "out": 1, "args": [], "owner": 0, "shape": [1]}
    assert fresh[1].begin(pack_instruction(1, op)) == []
    assert not fresh[1].busy and fresh[1].store[1].shape == (1,)


def test_party_cost_counts_bytes():
    parties = _parties(2)
    msgs = _input(parties, 1, 1, [1, 2, 3])
    sent = sum(len(m) for _, _, m in msgs)
    _deliver(parties, msgs)
    assert parties[1].cost["sent"] == sent == parties[0].cost["received"]
    assert parties[0].cost["rounds"] == parties[1].cost["rounds"] == 1
