"""A larger Flower deployment (issue 30), as on real hosts: a SuperLink listening on every
interface (0.0.0.0) and ten SuperNodes with TLS, each organisation reaching the aggregator
at its own address, 127.0.0.2 to 127.0.0.11 (loopback addresses standing for the
aggregator as ten other machines see it; Linux routes all of 127/8 to lo, so no packet
leaves this machine), each in the SuperLink's certificate.

SecAgg+ with ten parties: degree 4 (``neighbours = 4``), a share threshold of 3 and
``min_survivors = 0.9`` (9 of 10): one machine dying mid-round leaves 9 survivors, every
secret with at least 3 live share holders, and the round completes; two dying leaves 8,
past the threshold, and the run fails naming both. A dead node is given up on at its stage
once the SuperLink declares it unavailable (two missed 30 s heartbeats: 30-60 s after it
died) or the stage's ``TIMEOUT`` passes, whichever comes first; the timeout is long, as a
live node's answer can take a minute when ten ClientApp processes start per stage on 2
loaded cores (measured: 65 s stages at load average 30).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cryptography import x509

pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")

from veil.experiments.flower_app import Loopback  # noqa: E402

from ._deploy import (  # noqa: E402
    GONE,
    fails,
    hybrid_plan,
    killing,
    local_twin,
    loopback_addresses,
    organisations,
    secagg_plan,
    spent,
)
from .test_flower import _task_identity  # noqa: E402, F401

pytestmark = pytest.mark.slow

PARTIES = 10
TIMEOUT = 180


def _secagg(tmp_path, parties=PARTIES):
    return organisations(tmp_path, parties, {"secagg": secagg_plan(
        parties, TIMEOUT, neighbours=4, min_survivors=0.9, identities="{identities}")})


def _deployment(tmp_path, nodes):
    """The SuperLink on 0.0.0.0, node i reaching it at 127.0.0.<2+i>."""
    addresses = loopback_addresses(len(nodes))
    deployment = Loopback(tmp_path / "deployment", parties=len(nodes), nodes=nodes,
                          bind="0.0.0.0", addresses=addresses)
    return deployment, addresses


def _run_killing(deployment, tmp_path, app, parties, stage, *, ok):
    """Run ``app``, killing each of ``parties`` once its node is asked for ``stage``;
    returns flwr's log (``ok``) or the error (the run must fail)."""
    with killing(deployment, parties, stage) as killed:
        out = deployment.run(app, timeout=1200) if ok else \
            fails(deployment, app, tmp_path / "out-secagg", timeout=1200)
    assert killed == set(parties)
    return out


def test_ten_nodes_secagg_plus_goes_on_past_a_node_killed_mid_round(tmp_path):
    """Party 6's machine dies once asked for its masked input: the run completes (exit
    0), says it went on without party 6 and at which stage, names it in results.json,
    and its model is the local twin's (the same run with party 6 lost at that stage) to
    1e-9: SecAgg+'s masks cancel exactly among the 9 survivors."""
    runs, apps, nodes = _secagg(tmp_path)
    deployment, addresses = _deployment(tmp_path, nodes)
    with deployment:
        cert = x509.load_pem_x509_certificate(
            (tmp_path / "deployment" / "tls" / "server.crt").read_bytes())
        named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {str(a) for a in named.get_values_for_type(x509.IPAddress)} >= set(addresses)
        log = _run_killing(deployment, tmp_path, apps["secagg"], [6], "masked_input", ok=True)
    assert deployment.pids() == []
    log = " ".join(log.split())          # flwr's stream wraps lines at 80 columns
    assert re.search(r"veil round 0: ok, 9 of 10 parties aggregated, accuracy [\d.]+", log), \
        log[-3000:]
    assert re.search(f"veil round 0 went on without: party 6 at stage masked_input: {GONE}",
                     log), log[-3000:]
    (secagg,) = json.loads((tmp_path / "out-secagg" / "results.json").read_text())["rounds"]
    assert secagg["status"] == "ok" and secagg["aggregated"] == 9
    assert re.match(f"party 6 at stage masked_input: {GONE}", secagg["lost"]), secagg
    local = local_twin(tmp_path, secagg_plan(PARTIES, neighbours=4, min_survivors=0.9), [6],
                       "masked_input")
    assert local.rounds[0]["aggregated"] == 9
    np.testing.assert_allclose(np.load(tmp_path / "out-secagg" / "params.npy"), local.params,
                               rtol=0, atol=1e-9)
    assert secagg["accuracy"] == local.rounds[0]["accuracy"]


def test_ten_nodes_secagg_plus_fails_naming_two_nodes_killed_past_the_threshold(tmp_path):
    """Parties 2 and 7 die once asked for their masked inputs: 8 of 10 left, below
    min_survivors = 9. The run fails (`veil fl submit` exits 1 on it) naming both parties
    and the stage, failure.json says why, and no results.json nor params.npy is written."""
    runs, apps, nodes = _secagg(tmp_path)
    deployment, _ = _deployment(tmp_path, nodes)
    with deployment:
        error = _run_killing(deployment, tmp_path, apps["secagg"], [2, 7], "masked_input",
                             ok=False)
    assert deployment.pids() == []
    assert "only 8 of 10 clients can go on, min_survivors=9" in error, error
    for party in (2, 7):
        assert re.search(f"party {party} at stage masked_input: {GONE}", error), error


def test_five_party_hybrid_round_on_a_dealer_free_key(tmp_path):
    """Five organisations make the threshold key with no dealer (512 bits: test size),
    each its own identity, public set-up and enrolment with the CLI; one hybrid round on
    the deployment aggregates all five, each charging its own ledger on its own node."""
    runs, apps, nodes = organisations(tmp_path, 5, {"hybrid": hybrid_plan(5, TIMEOUT)},
                                      keys="dealer-free")
    deployment, _ = _deployment(tmp_path, nodes)
    with deployment:
        log = " ".join(deployment.run(apps["hybrid"], timeout=1200).split())
    assert re.search(r"veil round 0: ok, 5 of 5 parties aggregated, accuracy [\d.]+, "
                     r"epsilon [\d.]+", log), log[-3000:]
    (hybrid,) = json.loads((tmp_path / "out-hybrid" / "results.json").read_text())["rounds"]
    assert hybrid["status"] == "ok" and hybrid["aggregated"] == 5 and "lost" not in hybrid
    server = spent(tmp_path / "out-hybrid" / "ledger.sqlite")
    assert 0 < server == pytest.approx(hybrid["epsilon"])
    for i in range(5):
        assert spent(tmp_path / f"org{i}" / "ledger.sqlite") == pytest.approx(server)
