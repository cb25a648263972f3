"""The hybrid approach deployed with no dealer at all, file by file as the CLI makes them.

Three organisations generate the threshold key together (:mod:`veil.crypto.dkg` parties in
this process, at TEST SIZE: 256-bit modulus, ``insecure_ok``), each keeping only its own
``party-I.key``; each makes its own identity (``veil fl identity``), builds ``public.bin``
from its own share file and the published identity keys (``veil fl setup``) and its
``party-I.id`` (``veil fl enrol``); then one hybrid round runs through the real ClientApp of
a generated Flower app, each node naming only its own organisation's files.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")

from veil.cli.main import main  # noqa: E402
from veil.dp import Ledger  # noqa: E402
from veil.errors import ConfigError, ProtocolError  # noqa: E402
from veil.experiments.flower_app import _federation  # noqa: E402
from veil.fl.hybrid.setup import PublicSetup, assemble, enrol, load_party  # noqa: E402

from ._deploy import dealer_free, keygen, spent  # noqa: E402
from .test_flower import _task_identity  # noqa: E402, F401
from .test_flower_nodes import _deployment, _server  # noqa: E402


@pytest.fixture(scope="module")
def orgs(tmp_path_factory):
    """Every organisation's own files, each made by the CLI on its own machine."""
    root = tmp_path_factory.mktemp("orgs")
    return root, dealer_free(root)


def test_each_party_builds_the_same_public_set_up_and_no_share_enters_it(orgs):
    root, public_key = orgs
    copies = [(root / f"org{i}" / "public.bin").read_bytes() for i in range(3)]
    assert copies[0] == copies[1] == copies[2]
    setup = PublicSetup.from_bytes(copies[0], insecure_ok=True)
    assert setup.public_key == public_key
    for i in range(3):
        share, ident = load_party(i, root / f"org{i}" / f"party-{i}.key",
                                  root / f"org{i}" / f"party-{i}.id", insecure_ok=True)
        assert share.public_key == public_key and ident.setup == setup
        # public.bin is the public key and identity keys only: no share's secret in it
        secret = int(share._share).to_bytes((share._share.bit_length() + 7) // 8, "big")
        assert secret not in copies[0]
        assert (root / f"org{i}" / f"identity-{i}.key").stat().st_mode & 0o077 == 0
        assert (root / f"org{i}" / f"party-{i}.id").stat().st_mode & 0o077 == 0


def test_a_round_on_dealer_free_files_matches_the_local_runtime(tmp_path, orgs):
    root, public_key = orgs
    dealt = root / "org0"          # the aggregator gets public.bin from one party
    configs = {i: {"key-share": str(root / f"org{i}" / f"party-{i}.key"),
                   "identity": str(root / f"org{i}" / f"party-{i}.id")} for i in range(3)}
    app, nodes = _deployment(tmp_path, dealt, epsilon=50.0, nodes=configs)
    federation = _server(app, nodes, tmp_path / "server.sqlite")
    history = federation.run()
    assert [r["status"] for r in history.rounds] == ["ok"]   # threshold decryption worked
    server = spent(tmp_path / "server.sqlite")
    for i in range(3):
        assert spent(tmp_path / f"org{i}" / "ledger.sqlite") == pytest.approx(server)
    # the same run under the local runtime (its own dealt key): the same model up to the
    # distributed noise, small at epsilon = 50 (the deployment's is secure, not seeded)
    _, local = _federation(tmp_path / "hybrid.toml")
    local.ledger = Ledger(50.0, 1e-5)
    reference = local.run()
    assert np.abs(reference.params).max() > 0.1          # the round moved the model
    # (measured: the two differ by ~0.0015 at most; a wrong decryption is garbage)
    np.testing.assert_allclose(history.params, reference.params, atol=0.02)
    assert history.rounds[0]["accuracy"] == pytest.approx(reference.rounds[0]["accuracy"],
                                                          abs=0.1)


def test_a_set_up_of_another_key_or_missing_a_party_is_refused(tmp_path, orgs):
    root, _ = orgs
    keygen(tmp_path, "other")                      # a second, unrelated key generation
    published = [root / f"org{i}" / f"identity-{i}.json" for i in range(3)]
    # party 1 enrols with a public.bin whose key is not the key of its share
    other = assemble(tmp_path / "other0" / "party-0.key", published, tmp_path / "other.bin",
                     insecure_ok=True)
    with pytest.raises(ConfigError, match="not of this federation's key"):
        enrol(1, root / "org1" / "party-1.key", root / "org1" / "identity-1.key",
              tmp_path / "other.bin", tmp_path / "party-1.id", identities=published,
              insecure_ok=True)
    assert not (tmp_path / "party-1.id").exists()
    assert other.identities == PublicSetup.load(root / "org0" / "public.bin",
                                                insecure_ok=True).identities
    # an identity table that lacks party 2: no public.bin is written
    with pytest.raises(ConfigError, match="no identity for party 2"):
        assemble(root / "org0" / "party-0.key", published[:2], tmp_path / "short.bin",
                 insecure_ok=True)
    assert not (tmp_path / "short.bin").exists()
    # the CLI says the same, exit code 2, nothing written
    assert main(["fl", "setup", "--key-share", str(root / "org0" / "party-0.key"),
                 "--identities", str(published[0]), "--out", str(tmp_path / "cli.bin"),
                 "--insecure-ok"]) == 2
    assert not (tmp_path / "cli.bin").exists()
    # another party's identity key: refused
    with pytest.raises(ConfigError, match="not the one its set-up lists"):
        enrol(1, root / "org1" / "party-1.key", root / "org0" / "identity-0.key",
              root / "org1" / "public.bin", tmp_path / "party-1.id", identities=published,
              insecure_ok=True)
    # two tables giving party 0 different keys
    (tmp_path / "fake.json").write_text('{"0": "' + "ab" * 32 + '"}')
    with pytest.raises(ConfigError, match="another key"):
        assemble(root / "org0" / "party-0.key", [*published, tmp_path / "fake.json"],
                 tmp_path / "fake.bin", insecure_ok=True)
    # an identity is never replaced silently
    assert main(["fl", "identity", "--party", "0", "--out", str(root / "org0")]) == 2


def test_a_node_with_a_share_of_another_key_refuses_before_anything_is_charged(tmp_path, orgs):
    root, _ = orgs
    keygen(tmp_path, "other")
    configs = {i: {"key-share": str(root / f"org{i}" / f"party-{i}.key"),
                   "identity": str(root / f"org{i}" / f"party-{i}.id")} for i in range(3)}
    configs[1]["key-share"] = str(tmp_path / "other1" / "party-1.key")
    app, nodes = _deployment(tmp_path, root / "org0", nodes=configs)
    federation = _server(app, nodes, tmp_path / "server.sqlite")
    with pytest.raises(ProtocolError, match="not of this federation's key"):
        federation.runtime.connect(federation.clients)
    assert spent(tmp_path / "server.sqlite") == 0.0
    assert not any(os.path.exists(tmp_path / f"org{i}" / "ledger.sqlite") for i in range(3))


def test_enrol_refuses_a_set_up_with_another_partys_identity_swapped(tmp_path, orgs):
    """Attack (issue 29, item 11): the aggregator hands party 1 a ``public.bin`` whose entry
    for party 2 is the aggregator's own identity key (it could then sign as party 2).
    ``enrol`` checked only party 1's own entry and accepted it; it now checks every entry
    against the identity tables party 1 holds (the published ``identity-I.json``)."""
    from veil.crypto.identity import make_identities

    root, _ = orgs
    published = [root / f"org{i}" / f"identity-{i}.json" for i in range(3)]
    honest = PublicSetup.load(root / "org1" / "public.bin", insecure_ok=True)
    (_,), (forged,) = make_identities(1)
    swapped = PublicSetup(honest.public_key, (*honest.identities[:2], forged))
    swapped.save(tmp_path / "swapped.bin")
    with pytest.raises(ConfigError, match="party 2"):
        enrol(1, root / "org1" / "party-1.key", root / "org1" / "identity-1.key",
              tmp_path / "swapped.bin", tmp_path / "party-1.id", identities=published,
              insecure_ok=True)
    assert not (tmp_path / "party-1.id").exists()
    enrol(1, root / "org1" / "party-1.key", root / "org1" / "identity-1.key",
          root / "org1" / "public.bin", tmp_path / "party-1.id", identities=published,
          insecure_ok=True)
    assert oct((tmp_path / "party-1.id").stat().st_mode & 0o777) == "0o600"


def test_set_up_files_and_identities_are_replaced_only_with_force_and_named(orgs, capsys):
    """`veil fl setup/enrol --out X` replaced X silently (an enrolled party's private
    identity file included): now refused, nothing changed; --force replaces and names it."""
    root, _ = orgs
    org = root / "org1"
    published = [str(root / f"org{i}" / f"identity-{i}.json") for i in range(3)]
    tables = [a for p in published for a in ("--identities", p)]
    setup = ["fl", "setup", "--key-share", str(org / "party-1.key"), *tables,
             "--out", str(org / "public.bin"), "--insecure-ok"]
    enrol_ = ["fl", "enrol", "--party", "1", "--key-share", str(org / "party-1.key"),
              "--identity-key", str(org / "identity-1.key"), "--setup", str(org / "public.bin"),
              "--out", str(org / "party-1.id"), *tables, "--insecure-ok"]
    for argv, name in ((setup, "public.bin"), (enrol_, "party-1.id")):
        before = (org / name).read_bytes()
        capsys.readouterr()
        assert main(argv) == 2
        assert "--force" in capsys.readouterr().err and (org / name).read_bytes() == before
        assert main([*argv, "--force"]) == 0
        assert f"replaced {org / name}" in " ".join(capsys.readouterr().err.split())
    assert (org / "party-1.id").stat().st_mode & 0o777 == 0o600


def test_tls_certificates_are_replaced_only_with_force(tmp_path, capsys):
    assert main(["fl", "certs", str(tmp_path)]) == 0
    key = (tmp_path / "server.key").read_bytes()
    assert main(["fl", "certs", str(tmp_path)]) == 2
    assert (tmp_path / "server.key").read_bytes() == key
    capsys.readouterr()
    assert main(["fl", "certs", str(tmp_path), "--force"]) == 0
    assert "replaced" in capsys.readouterr().err
    assert (tmp_path / "server.key").read_bytes() != key
