"""SecAgg+ against a malicious server: signed keys and the consistency round (Bonawitz et al.
2017, section 6). A server that shows two clients different survivor sets recovered a
client's update before the round existed; now no honest client helps it, and bad, foreign or
replayed signatures drop their sender instead of ending the run."""

from __future__ import annotations

import numpy as np
import pytest

from veil.crypto.identity import make_identities, sign
from veil.crypto.sharing import ShamirShare, combine_bytes
from veil.errors import ConfigError, CryptoError, ProtocolError
from veil.fl import Faults, Federation, LocalRuntime, Message
from veil.fl.messages import SERVER
from veil.fl.secagg import SecAggClient
from veil.fl.secagg.masks import agree, mask_info, prg
from veil.fl.secagg.protocol import survivors_statement
from veil.fl.secagg.ring import reduce_ring
from veil.fl.strategies import SecAgg
from veil.learn import LogisticRegression
from veil.random import check_rng

VICTIM, A, B, COLLUDERS = 0, 1, 2, (3, 4)


class _Round:
    """One SecAgg+ round driven by hand, stage by stage (the server's honest object does
    the bookkeeping; a test plays the malicious server by rewriting its requests)."""

    def __init__(self, data, strategy, seed=0):
        self.fed = Federation(data, LogisticRegression(), strategy, 1, rng=seed,
                              classes=[0, 1])
        self.rng = self.fed._round_rng(0)
        self.server = strategy.server(0, self.fed.params, sorted(self.fed.clients), self.rng)
        self.replies: dict[str, dict[int, Message]] = {}

    def ask(self, requests, *, to_server=True):
        """Deliver requests; each client's answer (or the ProtocolError it raised)."""
        out = {}
        for msg in requests:
            try:
                (reply,) = self.fed.clients[msg.recipient].handle(msg, self.rng)
            except ProtocolError as exc:
                out[msg.recipient] = exc
                continue
            out[msg.recipient] = reply
            self.replies.setdefault(msg.stage, {})[msg.recipient] = reply
            if to_server:
                self.server.receive(reply)
        return out

    def honest_until(self, stage):
        """Run the honest stages before ``stage``; the server's requests for it."""
        requests = self.server.start()
        while requests[0].stage != stage:
            self.ask(requests)
            requests = self.server.close_stage()
        return requests


def _request(to, stage, **body):
    return Message("secagg", 0, stage, SERVER, to, body)


def _recover_victim(run, key_shares, seed_shares):
    """What the server computes from t shares of the victim's mask key and t of its
    self-mask seed: the victim's encoded update, decoded."""
    plan, server = run.server.plan, run.server
    s_v = combine_bytes([ShamirShare.from_bytes(s) for s in key_shares])
    b_v = combine_bytes([ShamirShare.from_bytes(s) for s in seed_shares])
    masked = run.replies["masked_input"][VICTIM].body
    x = masked["masked"].copy()
    x -= prg(b_v, x.size, plan.bits, plan.prg)
    for j in masked["partners"]:
        mask = prg(agree(s_v, server.keys[j][1], mask_info(0, VICTIM, j)), x.size, plan.bits,
                   plan.prg)
        x = x - mask if VICTIM < j else x + mask
    x = reduce_ring(x, plan.bits).astype(np.int64)
    x[x >= 2 ** (plan.bits - 1)] -= 2 ** plan.bits
    return x[:run.fed.params.size] / plan.scale


def _colluder_signs(run, colluder, view):
    """A colluder's signature on any survivor set the server likes (this round's context
    and the colluder's own keys of this round)."""
    return sign(run.fed.clients[colluder]._identity, survivors_statement(
        run.server.context, colluder, run.server.keys[colluder], view))


def _split_view_attack(run):
    """The server tells A the victim dropped (asks its mask-key share) and B that it
    survived (asks its self-mask share); two colluding clients give it both of theirs."""
    held = {c: run.fed.clients[c]._held[VICTIM] for c in COLLUDERS}
    key_shares = [held[c][0] for c in COLLUDERS]
    seed_shares = [held[c][1] for c in COLLUDERS]
    everyone = np.array(sorted(run.fed.clients))
    without_victim = everyone[everyone != VICTIM]
    asks = {A: {"survivors": [], "dropped": [VICTIM]},
            B: {"survivors": [VICTIM], "dropped": []}}
    if run.server.consistency:
        shown = {A: without_victim, B: everyone, VICTIM: everyone}
        answers = run.ask([_request(c, "consistency", survivors=u3)
                           for c, u3 in shown.items()], to_server=False)
        signed = {c: answers[c].body["signature"] for c in shown}
        for c, view in ((A, without_victim), (B, everyone)):
            # the colluders sign whatever set the server likes; the honest ones' signatures
            # are all the server has to forward
            forged = {k: _colluder_signs(run, k, view) for k in COLLUDERS}
            asks[c]["signatures"] = {**{k: s for k, s in signed.items() if k != c}, **forged}
    answers = run.ask([_request(c, "unmask", **body) for c, body in asks.items()],
                      to_server=False)
    revealed = {c: a for c, a in answers.items() if isinstance(a, Message)}
    if A in revealed:
        key_shares.append(revealed[A].body["key_shares"][VICTIM])
    if B in revealed:
        seed_shares.append(revealed[B].body["seed_shares"][VICTIM])
    return answers, key_shares, seed_shares


@pytest.mark.parametrize("consistency", [False, True])
def test_a_server_showing_two_survivor_sets_recovers_an_update_only_without_the_round(
        clients, known_updates, consistency):
    """5 clients, complete graph, t = 3 of 4; the server colludes with 2 clients (below t).
    Without the consistency round (the protocol before it) the server unmasks the victim's
    update; with it, A holds 2 valid signatures on the set it was shown and refuses."""
    data = clients(5)
    inner = known_updates(scale=0.5, weighted=False)
    run = _Round(data, SecAgg(inner, bits=32, consistency=consistency))
    run.honest_until("consistency" if consistency else "unmask")
    assert run.server.plan.threshold == 3
    answers, key_shares, seed_shares = _split_view_attack(run)
    truth = np.clip(inner.delta(*data[VICTIM]), -1, 1)
    if not consistency:
        recovered = _recover_victim(run, key_shares, seed_shares)
        np.testing.assert_allclose(recovered, truth, atol=1 / run.server.plan.scale)
        return
    assert isinstance(answers[A], ProtocolError)
    assert "2 valid signatures" in str(answers[A]) and "refusing to unmask" in str(answers[A])
    assert len(key_shares) == 2          # the colluders' only: below t
    with pytest.raises(CryptoError):
        _recover_victim(run, key_shares, seed_shares)


def test_a_client_refuses_to_sign_a_survivor_set_without_itself(clients, known_updates):
    run = _Round(clients(5), SecAgg(known_updates(weighted=False)))
    run.honest_until("consistency")
    for shown, why in (([1, 2, 3, 4], "without itself"), ([0, 1, 1, 2], "strictly"),
                       ([1, 0, 2], "strictly"), ([-1, 0], "strictly")):
        (answer,) = run.ask([_request(VICTIM, "consistency", survivors=np.array(shown))],
                            to_server=False).values()
        assert isinstance(answer, ProtocolError) and why in str(answer)


def test_a_client_refuses_to_unmask_when_the_round_is_skipped(clients, known_updates):
    run = _Round(clients(5), SecAgg(known_updates(weighted=False)))
    run.honest_until("consistency")
    (answer,) = run.ask([_request(A, "unmask", survivors=[0], dropped=[], signatures={})],
                        to_server=False).values()
    assert isinstance(answer, ProtocolError) and "without a consistency round" in str(answer)


def test_an_unmask_request_must_agree_with_the_signed_set(clients, known_updates):
    run = _Round(clients(5), SecAgg(known_updates(weighted=False)))
    requests = run.honest_until("consistency")
    run.ask(requests)
    honest = {m.recipient: m for m in run.server.close_stage()}
    body = {**honest[A].body, "survivors": [], "dropped": [VICTIM]}   # VICTIM is in U3
    (answer,) = run.ask([_request(A, "unmask", **body)], to_server=False).values()
    assert isinstance(answer, ProtocolError) and "disagrees" in str(answer)


def test_signatures_of_non_neighbours_and_garbage_do_not_count(clients, known_updates):
    """Degree 4 of 10: valid signatures on the right set, but from clients that are not
    this client's neighbours, and garbled ones, are not counted (and never crash)."""
    run = _Round(clients(10), SecAgg(known_updates(weighted=False), neighbours=4))
    run.ask(run.honest_until("consistency"))
    signatures = {c: r.body["signature"] for c, r in run.replies["consistency"].items()}
    honest = {m.recipient: m for m in run.server.close_stage()}
    target = min(honest)
    neighbours = set(run.server.graph[target])
    strangers = {c: s for c, s in signatures.items() if c not in neighbours | {target}}
    garbage = {c: b"\x01" * len(s) for c, s in signatures.items() if c in neighbours}
    for forwarded in (strangers, garbage, {**strangers, **garbage}, {c: b"" for c in
                                                                      neighbours}):
        body = {**honest[target].body, "signatures": forwarded}
        (answer,) = run.ask([_request(target, "unmask", **body)], to_server=False).values()
        assert isinstance(answer, ProtocolError) and "0 valid signatures" in str(answer)
        run.fed.clients[target]._stage = 3     # the same request again (consistency done)
    (answer,) = run.ask([honest[target]], to_server=False).values()
    assert isinstance(answer, Message)    # the honest request is answered


def test_a_swapped_key_at_setup_is_refused(clients, known_updates):
    """The server puts its own X25519 key in place of a neighbour's (to read the shares
    sent to it): the key does not carry the neighbour's signature, the client refuses."""
    run = _Round(clients(5), SecAgg(known_updates(weighted=False)))
    requests = run.honest_until("share_keys")
    to_a = next(m for m in requests if m.recipient == A)
    keys = dict(to_a.body["keys"])
    c_pk, s_pk, signature = keys[B]
    keys[B] = [bytes(reversed(c_pk)), s_pk, signature]
    (answer,) = run.ask([_request(A, "share_keys", keys=keys)], to_server=False).values()
    assert isinstance(answer, ProtocolError) and "do not carry its signature" in str(answer)


class _BadSignature(SecAggClient):
    """Signs garbage (``how="garbled"``) or replays its previous round's signature of the
    survivor set (``how="replay"``)."""

    how = "garbled"
    kept: dict[int, bytes] = {}

    def _on_consistency(self, msg, rng):
        (reply,) = super()._on_consistency(msg, rng)
        signature = reply.body["signature"]
        if self.how == "garbled":
            signature = bytes(64)
        elif self.how == "replay":
            signature = self.kept.get(self.client_id, signature)
            self.kept[self.client_id] = reply.body["signature"]
        return [Message(reply.protocol, reply.round, reply.stage, reply.sender, SERVER,
                        {"signature": signature})]


class _BadKeySignature(SecAggClient):
    """Signs its setup keys with garbage."""

    def _on_setup(self, msg, rng):
        (reply,) = super()._on_setup(msg, rng)
        return [Message(reply.protocol, reply.round, reply.stage, reply.sender, SERVER,
                        {**reply.body, "signature": b"\x07" * 64})]


def _swap(fed, i, cls):
    old = fed.clients[i]
    fed.clients[i] = cls(i, old.trainer, old.strategy, identity=old._identity,
                         directory=old._directory)


@pytest.mark.parametrize("how", ["garbled", "replay"])
def test_a_bad_or_replayed_signature_drops_its_sender_not_the_round(clients, known_updates,
                                                                    how):
    data = clients(6)
    inner = known_updates(weighted=False)
    strategy = SecAgg(inner, bits=32)
    fed = Federation(data, LogisticRegression(), strategy, 2, rng=0, classes=[0, 1])
    _swap(fed, 3, type("Bad", (_BadSignature,), {"how": how, "kept": {}}))
    history = fed.run()
    statuses = [r["status"] for r in history.rounds]
    assert statuses == ["ok", "ok"], [r.get("error") for r in history.rounds]
    # client 3's masked input is in the sums (it is in U3); its seed comes from its holders
    assert [r["aggregated"] for r in history.rounds] == [6, 6]


def test_identity_configuration_errors(clients, known_updates):
    strategy = SecAgg(known_updates(weighted=False))
    fed = Federation(clients(3), LogisticRegression(), strategy, 1, rng=0, classes=[0, 1])
    old = fed.clients[0]
    (other,), _ = make_identities(1)
    with pytest.raises(ConfigError, match="identity key"):
        SecAggClient(0, old.trainer, strategy, identity=other, directory=old._directory)
    with pytest.raises(ConfigError, match="identity key"):
        SecAggClient(0, old.trainer, strategy)
    with pytest.raises(ConfigError, match="consistency"):
        SecAgg(known_updates(weighted=False), consistency="yes")


@pytest.mark.parametrize("consistency", [False, True])
def test_both_variants_give_the_exact_sum_under_dropouts_at_every_stage(
        clients, known_updates, consistency):
    data = clients(10)
    inner = known_updates(scale=0.8, weighted=False)
    strategy = SecAgg(inner, bits=32, neighbours=6, consistency=consistency)
    stages = strategy.server(0, np.zeros(7), range(10), check_rng(0)).stages
    assert ("consistency" in stages) == consistency
    for seed, stage in enumerate(stages[2:]):
        fed = Federation(data, LogisticRegression(), strategy, 1, rng=seed, classes=[0, 1])
        rng = fed._round_rng(0)
        server = strategy.server(0, fed.params, sorted(fed.clients), rng)
        report = LocalRuntime(Faults(dropout=0.2, dropout_exact=True, dropout_stage=stage)
                              ).run_round(server, fed.clients, rng)
        assert report.completed, report.error
        assert report.dropped and set(report.dropped.values()) == {stage}
        survivors = report.result.clients
        exact = fed.initial_params + np.mean([np.clip(inner.delta(*data[i]), -1, 1)
                                              for i in survivors], axis=0)
        np.testing.assert_allclose(report.result.params, exact, atol=1e-6)


def test_the_run_config_sets_the_variant_and_the_identity_table(tmp_path):
    from veil.crypto.identity import write_identities
    from veil.experiments.fl_config import load_config

    write_identities(tmp_path / "keys", 3)
    base = ('[data]\ndataset = "digits"\nclients = 3\n[model]\ntype = "softmax_regression"\n'
            "[training]\nrounds = 1\n[run]\nseed = 0\n[secagg]\n")
    config = tmp_path / "run.toml"
    config.write_text(base + "consistency = false\n")
    cfg = load_config(config)
    assert cfg.strategy(cfg.data(0)[0]).consistency is False
    config.write_text(base + 'identities = "keys/identities.json"\n')  # beside the config
    cfg = load_config(config)
    strategy = cfg.strategy(cfg.data(0)[0])
    assert strategy.consistency and strategy.deployed and sorted(strategy.identities) == [0, 1, 2]
    config.write_text(base + "min_cohort = 2\n")
    cfg = load_config(config)
    assert cfg.strategy(cfg.data(0)[0]).min_cohort_of(3) == 2


def test_the_cli_makes_identity_keys(tmp_path):
    from veil.cli.main import main
    from veil.crypto.identity import public_identity, read_key, read_table

    assert main(["fl", "identities", str(tmp_path / "keys"), "--parties", "2"]) == 0
    table = read_table(tmp_path / "keys" / "identities.json")
    assert public_identity(read_key(tmp_path / "keys" / "identity-1.key")) == table[1]
    assert main(["fl", "identities", str(tmp_path / "none"), "--parties", "0"]) == 2


def test_a_bad_key_signature_at_setup_drops_its_sender(clients, known_updates):
    data = clients(6)
    inner = known_updates(weighted=False)
    fed = Federation(data, LogisticRegression(), SecAgg(inner, bits=32), 1, rng=0,
                     classes=[0, 1])
    _swap(fed, 2, _BadKeySignature)
    history = fed.run()
    assert history.rounds[0]["status"] == "ok", history.rounds[0].get("error")
    assert history.rounds[0]["aggregated"] == 5
    survivors = [0, 1, 3, 4, 5]
    exact = fed.initial_params + np.mean([inner.delta(*data[i]) for i in survivors], axis=0)
    np.testing.assert_allclose(history.params, exact, atol=1e-6)


# -- attacks of issue #29 (items 1, 4, 10): the client's own cohort, signatures bound to ----
# -- their whole context, one client's bad bytes dropping that client -------------------------
def _deployed_round(data, inner, privates, table, seed=0):
    """A round of a deployment: the identity table is fixed across runs, each client gets
    its own long-lived private key where it runs."""
    run = _Round(data, SecAgg(inner, bits=32, identities=table), seed=seed)
    for c, client in run.fed.clients.items():
        client.use_identity(privates[c])
    return run


def _colluder_keys(run, colluder, ctx):
    """Fresh X25519 keys the server holds for its colluder, signed by the colluder under
    the round context ``ctx`` the victim was shown."""
    from veil.fl.secagg.masks import public_key
    from veil.fl.secagg.protocol import keys_statement
    from veil.random import secure_rng

    c_sk, s_sk = secure_rng().bytes(32), secure_rng().bytes(32)
    c_pk, s_pk = public_key(c_sk), public_key(s_sk)
    signature = sign(run.fed.clients[colluder]._identity,
                     keys_statement(ctx, colluder, c_pk, s_pk))
    return c_sk, s_sk, [c_pk, s_pk, signature]


def _small_cohort_attack(run, colluder):
    """#29 item 1: the server tells the victim the round has 2 clients, the colluder its only
    neighbour. A client that derives degree and threshold from the announced cohort accepts
    degree 1, threshold 1, and hands the colluder both of its secrets (s_v and b_v) in one
    1-of-1 share each: the server unmasks the victim's exact update."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from veil.crypto.sharing import split_bytes
    from veil.fl.messages import decode, encode
    from veil.fl.secagg.masks import channel_info

    strategy, params = run.server.strategy, run.fed.params
    cohort = [VICTIM, colluder]
    plan = strategy.plan(0, params, cohort)
    honest = run.server.start()[VICTIM]
    victim = run.fed.clients[VICTIM]
    body = {**honest.body, "neighbours": [colluder], "sampled": 2, "cohort": cohort,
            "secagg": plan.public()}
    (keys,) = victim.handle(_request(VICTIM, "setup", **body), run.rng)
    c_pk_v = keys.body["c_pk"]
    c_sk, s_sk, entry = _colluder_keys(run, colluder, victim._context)
    (shared,) = victim.handle(_request(VICTIM, "share_keys", keys={colluder: entry}), run.rng)
    info = channel_info(0, VICTIM, colluder)
    _, _, s_share, b_share = decode(AESGCM(agree(c_sk, c_pk_v, info)).decrypt(
        bytes(12), shared.body["ciphertexts"][colluder], info))
    # the colluder's own (1-of-1) shares for the victim, so that it masks with it
    own = [split_bytes(bytes(32), 1, 1)[0].to_bytes() for _ in range(2)]
    back = channel_info(0, colluder, VICTIM)
    ct = AESGCM(agree(c_sk, c_pk_v, back)).encrypt(bytes(12), encode([colluder, VICTIM, *own]),
                                                   back)
    (masked,) = victim.handle(_request(VICTIM, "masked_input", params=params,
                                       ciphertexts={colluder: ct}), run.rng)
    s_v = combine_bytes([ShamirShare.from_bytes(s_share)])
    b_v = combine_bytes([ShamirShare.from_bytes(b_share)])
    x = masked.body["masked"].copy()
    x -= prg(b_v, x.size, plan.bits, plan.prg)
    mask = prg(agree(s_v, public_key_of(s_sk), mask_info(0, VICTIM, colluder)), x.size,
               plan.bits, plan.prg)
    x = x - mask if VICTIM < colluder else x + mask
    x = reduce_ring(x, plan.bits).astype(np.int64)
    x[x >= 2 ** (plan.bits - 1)] -= 2 ** plan.bits
    return x[:params.size] / plan.scale


def public_key_of(secret):
    from veil.fl.secagg.masks import public_key

    return public_key(secret)


@pytest.mark.parametrize("min_cohort", [None, 2])
def test_a_server_announcing_a_two_client_cohort_is_refused(clients, known_updates,
                                                            min_cohort):
    """#29 item 1 (attack above): 5 clients, complete graph, one colluder. The victim knows
    the federation's size from its identity table and its own minimum cohort from its plan
    (everyone is sampled: 5), so it refuses the round at setup and reveals nothing. A
    configuration that itself allows 2-client rounds (``min_cohort=2``) gets what it asked
    for: the attack then recovers the update exactly (the test's attack is real)."""
    data = clients(5)
    inner = known_updates(scale=0.5, weighted=False)
    run = _Round(data, SecAgg(inner, bits=32, min_cohort=min_cohort))
    truth = np.clip(inner.delta(*data[VICTIM]), -1, 1)
    if min_cohort == 2:
        recovered = _small_cohort_attack(run, colluder=4)
        np.testing.assert_allclose(recovered, truth, atol=1 / run.server.plan.scale)
        return
    with pytest.raises(ProtocolError, match="cohort of 2 clients.*no fewer than 5"):
        recovered = _small_cohort_attack(run, colluder=4)
        pytest.fail(f"the victim's update was recovered: error "
                    f"{np.max(np.abs(recovered - truth)):.2g}")


def test_the_minimum_cohort_and_the_noise_come_from_the_clients_own_configuration(
        known_updates):
    """Fixed-size sampling: the cohort itself; Poisson sampling at rate q: max(2, qN/2).
    The distributed noise is calibrated for the minimum cohort's survivors, however large
    a cohort the server announces (more noise per client, never less)."""
    from veil.fl.strategies import DPFedAvg

    assert SecAgg(known_updates(weighted=False)).min_cohort_of(20) == 20
    assert SecAgg(known_updates(weighted=False, fraction=0.3)).min_cohort_of(20) == 6
    poisson = DPFedAvg(known_updates(), noise_multiplier=1.0, sample_rate=0.4,
                       noise="distributed")
    strategy = SecAgg(poisson, bits=48)
    assert strategy.min_cohort_of(20) == 4
    small = strategy.plan(0, np.zeros(5), range(4), population=20)
    large = strategy.plan(0, np.zeros(5), range(16), population=20)
    assert large.noise_std / large.scale == pytest.approx(small.noise_std / small.scale,
                                                          rel=1e-9)
    assert large.rho == pytest.approx(small.rho)


def test_survivor_signatures_replayed_from_another_run_do_not_count(clients, known_updates):
    """#29 item 4: 4 clients with long-lived identity keys (a deployment), complete graph,
    threshold 2, one colluder (3). In an earlier run the server had client B sign the survivor
    set {A, B, 3} (the victim "dropped"). In today's run it shows A that set (A signs it) and
    B the full set; A needs 2 neighbours' signatures on its set: the colluder's and B's from
    the earlier run. When signatures cover only (round, set), A accepts the replay and reveals
    its share of the victim's mask key while B reveals its share of the victim's self-mask
    seed: with the colluder's shares, the victim's update is recovered. Signatures that bind
    the run (the signer's fresh keys of this round) make the replay worthless."""
    data = clients(4)
    inner = known_updates(scale=0.5, weighted=False)
    privates, public = make_identities(4)
    table = dict(enumerate(public))
    colluder, view = 3, np.array([A, B, 3])
    earlier = _deployed_round(data, inner, privates, table)
    earlier.ask(earlier.honest_until("consistency")[:0])
    (old,) = earlier.ask([_request(B, "consistency", survivors=view)],
                         to_server=False).values()
    replayed = old.body["signature"]

    run = _deployed_round(data, inner, privates, table, seed=1)
    run.honest_until("consistency")
    assert run.server.plan.threshold == 2
    everyone = np.array([0, 1, 2, 3])
    answers = run.ask([_request(c, "consistency", survivors=u3)
                       for c, u3 in ((A, view), (B, everyone), (VICTIM, everyone))],
                      to_server=False)
    signed = {c: a.body["signature"] for c, a in answers.items()}
    asks = {A: {"survivors": [], "dropped": [VICTIM],
                "signatures": {B: replayed, colluder: _colluder_signs(run, colluder, view)}},
            B: {"survivors": [VICTIM], "dropped": [],
                "signatures": {VICTIM: signed[VICTIM],
                               colluder: _colluder_signs(run, colluder, everyone)}}}
    answers = run.ask([_request(c, "unmask", **body) for c, body in asks.items()],
                      to_server=False)
    assert isinstance(answers[B], Message)       # B's view is genuinely signed
    if isinstance(answers[A], Message):
        held = run.fed.clients[colluder]._held[VICTIM]
        recovered = _recover_victim(run, [held[0], answers[A].body["key_shares"][VICTIM]],
                                    [held[1], answers[B].body["seed_shares"][VICTIM]])
        truth = np.clip(inner.delta(*data[VICTIM]), -1, 1)
        pytest.fail(f"A accepted the replayed signature: the victim's update was recovered "
                    f"(error {np.max(np.abs(recovered - truth)):.2g})")
    assert "1 valid signatures" in str(answers[A])


def test_one_clients_malformed_share_or_array_drops_that_client_not_the_round(
        clients, known_updates):
    """#29 item 10: a client that answers the unmask stage with a malformed share (or a
    share at another holder's index) used to abort the whole round when the server
    reconstructed; a wrong-shaped masked input likewise must only drop its sender. Each is
    now a ProtocolError naming the client, which is excluded, and the round completes with
    the exact sum from the other clients' shares."""
    from veil.crypto.sharing import split_bytes

    data = clients(6)
    inner = known_updates(scale=0.5, weighted=False)
    bad_share = split_bytes(bytes(32), 5, 3)[4].to_bytes()        # x = 5: not its index
    for tamper in ("garbage", "index", "shape"):
        run = _Round(data, SecAgg(inner, bits=32))
        stage = "masked_input" if tamper == "shape" else "unmask"
        requests = run.honest_until(stage)
        answers = run.ask(requests, to_server=False)
        liar = 2 if tamper != "index" else next(
            c for c, a in answers.items() if a.body["seed_shares"]
            and run.server.holders[next(iter(a.body["seed_shares"]))].index(c) + 1 != 5)
        for c, reply in answers.items():
            body = dict(reply.body)
            if c == liar and tamper == "shape":
                body["masked"] = body["masked"][:-1]
            elif c == liar:
                owner = next(iter(body["seed_shares"]))
                body["seed_shares"] = {**body["seed_shares"],
                                       owner: b"\x00garbage" if tamper == "garbage"
                                       else bad_share}
            msg = Message(reply.protocol, reply.round, reply.stage, c, SERVER, body)
            if c == liar:
                with pytest.raises(ProtocolError, match=f"client {liar}"):
                    run.server.receive(msg)
            else:
                run.server.receive(msg)
        requests = run.server.close_stage()
        while not run.server.done:
            run.ask(requests)
            requests = run.server.close_stage()
        survivors = run.server.result.clients
        assert (liar in survivors) == (tamper != "shape")
        exact = run.fed.params + np.mean([np.clip(inner.delta(*data[i]), -1, 1)
                                          for i in survivors], axis=0)
        np.testing.assert_allclose(run.server.result.params, exact, atol=1e-6)


def test_a_share_off_the_polynomial_aborts_the_round_naming_its_owner(clients, known_updates):
    """A well-formed share at its sender's index whose values are off the polynomial of
    the others passes the server's per-message checks; the reconstruction must still catch
    it (the shares beyond the threshold are checked at once by a random combination, issue
    35) and abort the round naming the client whose seed cannot be rebuilt, not return a
    wrong sum."""
    data = clients(6)
    run = _Round(data, SecAgg(known_updates(scale=0.5, weighted=False), bits=32))
    requests = run.honest_until("unmask")
    answers = run.ask(requests, to_server=False)
    liar = 2
    owner = next(iter(answers[liar].body["seed_shares"]))
    for c, reply in answers.items():
        body = dict(reply.body)
        if c == liar:
            share = ShamirShare.from_bytes(body["seed_shares"][owner])
            values = share.values.copy()
            values[0] = (int(values[0]) + 1) % (2**61 - 1)
            forged = ShamirShare(share.x, share.threshold, values, share.tag, share.length)
            body["seed_shares"] = {**body["seed_shares"], owner: forged.to_bytes()}
        run.server.receive(Message(reply.protocol, reply.round, reply.stage, c, SERVER, body))
    with pytest.raises(ProtocolError, match=f"client {owner}'s self-mask seed could not be "
                                            "reconstructed: inconsistent shares"):
        run.server.close_stage()
