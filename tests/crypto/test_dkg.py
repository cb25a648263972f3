"""Dealer-free threshold Paillier key generation (veil.crypto.dkg).

Keys here are 256 and 512 bits: TEST-ONLY sizes (insecure_ok=True); real keys are >= 2048.
"""

import pickle

import gmpy2
import numpy as np
import pytest

from veil.crypto import dkg, serialization, threshold
from veil.crypto.dkg import KeygenAbort, KeygenParams, KeygenParty, run_local
from veil.errors import ConfigError, CryptoError, ProtocolError
from veil.random import Generator


class Spy(KeygenParty):
    """Records the additive shares (N, p_i, q_i) of the accepted candidate, for the tests."""

    def _derive_key(self, N, p_i, q_i):
        self.record = (N, p_i, q_i)
        return (yield from super()._derive_key(N, p_i, q_i))

    def _exchange_shares(self, values, prime, what, **kw):
        dealt, zero = yield from super()._exchange_shares(values, prime, what, **kw)
        if what == "modulus share":
            self.modulus_dealt = dealt
        return dealt, zero

    def _open(self, mine, prime, what):
        opened = yield from super()._open(mine, prime, what)
        if what == "modulus":
            self.modulus_opened = (list(mine), opened)
        return opened


def make(bits, n, t, seed, cls=KeygenParty):
    params = KeygenParams.make(bits, n, t, insecure_ok=True)
    base = Generator(seed)
    streams = base.spawn(n)
    session = base.bytes(16)
    return [cls(i + 1, params, session, rng=streams[i]) for i in range(n)]


def run(bits, n, t, seed, cls=KeygenParty, **kw):
    parties = make(bits, n, t, seed, cls)
    received = {i: [] for i in range(1, n + 1)}
    user_tamper = kw.pop("tamper", None)

    def tamper(sender, recipient, message):
        if user_tamper is not None:
            message = user_tamper(sender, recipient, message)
        received[recipient].append(message)
        return message

    results, stats = run_local(parties, tamper=tamper, **kw)
    return parties, results, stats, received


@pytest.fixture(scope="module")
def key():
    parties, results, stats, received = run(512, 5, 3, 11, Spy)
    return parties, results, stats, received


def rounds_of(bits, n, t, seed):
    """The number of rounds a seeded run takes (runs replay exactly under the same seed)."""
    return run(bits, n, t, seed)[2].rounds


def test_generated_key_decrypts_paillier_ciphertexts(key):
    parties, results, stats, _ = key
    pk = results[0][0]
    shares = [s for _, s in results]
    assert pk.bits == 512 and pk.parties == 5 and pk.threshold == 3
    assert all(r[0] == pk for r in results)          # every party ends with the same key
    values = np.array([0, 1, -7, 123456789, 2**200, -(2**100)], dtype=object)
    c = pk.encrypt(values) + pk.encrypt(np.array([5] * 6, dtype=object))
    for subset in ([0, 1, 2], [2, 3, 4], [0, 2, 4], [4, 1, 3]):
        partials = [shares[i].partial_decrypt(c) for i in subset]
        assert list(pk.combine(partials)) == list(values + 5)
    c42 = pk.encrypt(42)
    assert pk.combine([s.partial_decrypt(c42) for s in shares]) == 42
    with pytest.raises(CryptoError, match="need 3"):
        pk.combine([s.partial_decrypt(c) for s in shares[:2]])


def test_shares_match_verification_keys_and_serialize(key):
    _, results, _, _ = key
    pk = results[0][0]
    assert pk.share_bits is not None and pk.share_bits > pk.n2.bit_length()
    pk2 = serialization.loads(serialization.dumps(pk), insecure_ok=True)  # a test-size key
    assert pk2 == pk and pk2.share_bits == pk.share_bits
    for _, share in results:
        share.check()
        back = serialization.loads(serialization.dumps(share), public_key=pk2)
        assert back.index == share.index
    share3 = pickle.loads(pickle.dumps(results[2][1]))            # forked workers pickle keys
    c = share3.public_key.encrypt(77)
    assert share3.public_key.combine([share3.partial_decrypt(c),
                                      results[0][1].partial_decrypt(c),
                                      results[1][1].partial_decrypt(c)]) == 77
    forged = threshold.KeyShare(pk, 2, results[0][1]._share)
    with pytest.raises(CryptoError, match="does not match"):
        forged.check()


def test_modulus_is_a_product_of_two_sieved_primes(key):
    parties, results, _, _ = key
    N = results[0][0].n
    assert all(p.record[0] == N for p in parties)
    p = sum(party.record[1] for party in parties)
    q = sum(party.record[2] for party in parties)
    assert p * q == N and p != q
    assert gmpy2.is_prime(p, 50) and gmpy2.is_prime(q, 50)
    assert p % 4 == 3 and q % 4 == 3
    assert N.bit_length() == 512
    small = 1
    for prime in range(3, 1 << 16, 2):
        if gmpy2.is_prime(prime):
            small *= prime
    assert gmpy2.gcd(N, small) == 1                  # no factor below 2^16
    assert parties[0].params.sieve_bound > 50


def test_no_party_view_contains_p_q_or_phi(key):
    parties, results, _, received = key
    p = sum(party.record[1] for party in parties)
    q = sum(party.record[2] for party in parties)
    phi = (p - 1) * (q - 1)
    params = parties[0].params
    secrets = [int(x) for x in (p, q, phi, p + q, p - 1, q - 1)]
    widths = {(x.bit_length() + 7) // 8 for x in secrets}
    widths |= {dkg._width(b) for b in (params.field_n, params.field_k, 1 << params.bits)}
    patterns = {x.to_bytes(w, "big") for x in secrets for w in widths
                if x.bit_length() <= 8 * w}
    for party in parties:
        view = b"".join(received[party.index])
        assert not any(pat in view for pat in patterns), f"party {party.index}"
        _, p_i, q_i = party.record
        assert p_i not in (p, q) and q_i not in (p, q)
        # its own shares leave at least 2^64 possibilities for p and q
        assert abs(p - p_i) > 2 ** 64 and abs(q - q_i) > 2 ** 64
        share = results[party.index - 1][1]
        assert int(share._share) not in secrets
    # the key share is not a function of phi alone: it is larger than N^2 and random
    assert len({int(s._share) for _, s in results}) == len(results)


def test_opened_modulus_shares_are_rerandomized(key):
    """The shares opened for N are not p(k) q(k): the product polynomial stays hidden."""
    parties, results, _, _ = key
    N = results[0][0].n
    P = parties[0].params.field_n
    for party in parties:
        mine, opened = party.modulus_opened
        k, K = opened.index(N), len(mine)
        p_k = sum(d[k] for d in party.modulus_dealt.values()) % P
        q_k = sum(d[K + k] for d in party.modulus_dealt.values()) % P
        assert mine[k] != p_k * q_k % P


def test_ten_parties_two_levels_of_products():
    pk, shares = dkg.distributed_keygen(256, parties=10, threshold=6, insecure_ok=True, rng=4)
    c = pk.encrypt(np.array([3, -4], dtype=object))
    assert list(pk.combine([s.partial_decrypt(c) for s in shares[4:]])) == [3, -4]


def test_parameters_are_checked():
    with pytest.raises(ConfigError, match="threshold"):
        KeygenParams.make(512, 3, 4, insecure_ok=True)
    with pytest.raises(ConfigError, match="insecure_ok"):
        KeygenParams.make(1024, 3, 2)
    with pytest.raises(ConfigError, match="parties"):
        KeygenParams.make(512, 2, 2, insecure_ok=True)
    with pytest.raises(ConfigError, match="stat_bits"):
        KeygenParams.make(512, 3, 2, insecure_ok=True, stat_bits=20)
    with pytest.raises(ConfigError, match=">= 256"):
        KeygenParams.make(128, 3, 2, insecure_ok=True)
    params = KeygenParams.make(2048, 3, 2)
    assert params.stat_bits == 40 and params.tau == 1
    with pytest.raises(ConfigError, match="session"):
        KeygenParty(1, params, b"short")
    with pytest.raises(ConfigError, match="index"):
        KeygenParty(4, params, bytes(16))


def test_dropout_aborts_naming_the_party_and_leaves_no_key():
    parties = make(256, 4, 2, 5)
    with pytest.raises(KeygenAbort, match="party 3: stopped sending") as info:
        run_local(parties, drop=(3, 4))
    assert info.value.party == 3
    for party in parties:
        with pytest.raises(ProtocolError, match="aborted"):
            party.result()


def test_malformed_message_aborts_naming_the_sender():
    def truncate(sender, recipient, message):
        return message[:-1] if sender == 2 and recipient == 1 else message

    parties = make(256, 3, 2, 6)
    with pytest.raises(KeygenAbort, match="party 2: malformed") as info:
        run_local(parties, tamper=truncate)
    assert info.value.party == 2
    assert not any(p.done for p in parties)


def test_inconsistent_key_share_and_partial_decryption_name_the_party():
    last = rounds_of(256, 4, 3, 8)                  # the confirmation round; key shares before

    def corrupt(round_, who):
        def tamper(sender, recipient, message):
            rnd = int.from_bytes(message[22:26], "big")
            if sender == who and recipient == 1 and rnd == round_:
                message = message[:-20] + bytes([message[-20] ^ 1]) + message[-19:]
            return message
        return tamper

    with pytest.raises(KeygenAbort, match="party 3: its key share does not match") as info:
        run(256, 4, 3, 8, tamper=corrupt(last - 1, 3))
    assert info.value.party == 3
    with pytest.raises(KeygenAbort, match="party 2: (key confirmation|malformed)") as info:
        run(256, 4, 3, 8, tamper=corrupt(last, 2))
    assert info.value.party == 2


def test_replayed_and_foreign_messages_are_refused():
    parties = make(256, 3, 2, 9)
    outs = {p.index: p.start() for p in parties}
    msg_2_to_1 = next(m for r, m in outs[2] if r == 1)
    parties[0].receive(2, msg_2_to_1)
    with pytest.raises(KeygenAbort, match="party 2: replayed"):
        parties[0].receive(2, msg_2_to_1)
    with pytest.raises(ProtocolError, match="aborted"):
        parties[0].receive(3, next(m for r, m in outs[3] if r == 1))
    other = make(256, 3, 2, 10)                      # another session
    o = other[2].start()
    with pytest.raises(KeygenAbort, match="party 3: wrong magic, session"):
        parties[1].receive(3, next(m for r, m in o if r == 2))
    with pytest.raises(ProtocolError, match="unknown sender"):
        parties[2].receive(7, b"x" * 40)


def test_messages_may_arrive_before_a_party_starts():
    parties = make(256, 3, 2, 12)
    late = parties[2]
    pending = []
    for party in parties[:2]:
        for recipient, message in party.start():
            if recipient == 3:
                assert late.receive(party.index, message) == []     # kept until it starts
            else:
                pending.append((party.index, recipient, message))
    for recipient, message in late.start():
        pending.append((3, recipient, message))
    assert late.round == 2          # round 1 was complete at once: it went on to round 2
    queue = list(pending)
    while queue:
        sender, recipient, message = queue.pop(0)
        queue.extend((recipient, r, m) for r, m in parties[recipient - 1].receive(sender, message))
    assert all(p.done for p in parties)
    assert parties[0].result()[0] == late.result()[0]


def test_distributed_keygen_mirrors_threshold_keygen():
    pk, shares = dkg.distributed_keygen(256, parties=3, threshold=2, insecure_ok=True, rng=3)
    assert isinstance(pk, threshold.ThresholdPublicKey)
    assert [s.index for s in shares] == [1, 2, 3]
    c = pk.encrypt(-99)
    assert pk.combine([shares[2].partial_decrypt(c), shares[0].partial_decrypt(c)]) == -99


@pytest.mark.parametrize("n, round_", [(3, 4), (3, 6), (4, 4), (4, 6)])
def test_a_flipped_opening_never_names_an_honest_party(n, round_):
    """Attack (issue 29, item 8): party 2 flips one bit of what it sends party 1 alone in
    round 4 (the opening of the moduli) or round 6 (biprimality values). Party 1 then
    works with other values than everyone else, and the first message that disagrees with
    its view came from an honest party, which it named (``party 1: malformed biprimality
    message``). Each message now carries a digest of every value its sender saw opened, so
    the parties see that their views differ, and abort without naming anyone: nothing they
    hold proves who lied. A run may also succeed (the flip changed nothing that mattered);
    it never blames an honest party."""
    from veil.crypto.dkg import _HEADER

    def flip(sender, recipient, message):
        if sender == 2 and recipient == 1 and int.from_bytes(message[22:26], "big") == round_:
            pos = _HEADER.size + 3
            message = message[:pos] + bytes([message[pos] ^ 4]) + message[pos + 1:]
        return message

    try:
        run_local(make(256, n, 2, 8), tamper=flip)
    except KeygenAbort as exc:
        assert exc.party in (None, 2), str(exc)
    except ProtocolError as exc:           # the key confirmation: no one is named
        assert "key confirmation failed" in str(exc), str(exc)
