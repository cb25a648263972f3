"""Issue #30: no command replaces keys, key shares, identities, set-up files, certificates or
its other outputs without ``--force``, and ``--force`` names every private key it replaced.

One test per command: the second run without ``--force`` exits 2, names the file and leaves
it as it was; with ``--force`` it replaces the file and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from veil.cli.main import main


def _hosts(folder: Path, certs: bool = True) -> Path:
    """A hosts file of parties p0, p1 on 127.0.0.1 (ports never opened here), with their
    certificates and keys beside its CA when ``certs``."""
    path = folder / "hosts.toml"
    path.write_text('session = "force"\nca = "certs/ca.crt"\n' + "".join(
        f'[[party]]\nindex = {i}\nname = "p{i}"\naddress = "127.0.0.1:{9 + i}"\n'
        for i in range(2)))
    if certs:
        from veil.net.certs import issue

        issue(folder / "certs", {"p0": ("127.0.0.1",), "p1": ("127.0.0.1",)})
    return path


def _run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())


def _refused_then_forced(capsys, argv, secret: Path) -> None:
    """``argv`` ran once; again it is refused (``secret`` untouched and named), and with
    --force it replaces ``secret`` and names it."""
    before = secret.read_bytes()
    code, text = _run(capsys, *argv)
    assert code == 2, text
    assert str(secret) in text and "--force" in text
    assert secret.read_bytes() == before
    code, text = _run(capsys, *argv, "--force")
    assert code == 0, text
    assert "replaced" in text and str(secret) in text.split("replaced", 1)[1]
    assert secret.read_bytes() != before


HYBRID = """
[data]
dataset = "wine"
clients = 3

[model]
type = "softmax_regression"

[training]
strategy = "hybrid"
rounds = 1

[privacy]
epsilon = 4.0
delta = 1e-5
clip_norm = 1.0

[hybrid]
honest = 2
key_bits = 256
insecure_ok = true

[run]
seed = 5
"""


def test_fl_deal(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(HYBRID)
    argv = ["fl", "deal", config, "--out", tmp_path / "dealt"]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "dealt" / "party-0.key")
    # public.bin alone is a set-up file too: refused without --force
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "public.bin").write_bytes(b"x")
    code, text = _run(capsys, "fl", "deal", config, "--out", tmp_path / "other")
    assert code == 2 and "public.bin" in text
    assert not (tmp_path / "other" / "party-0.key").exists()


def test_fl_identity(tmp_path, capsys):
    argv = ["fl", "identity", "--party", "1", "--out", tmp_path]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "identity-1.key")
    assert (tmp_path / "identity-1.key").stat().st_mode & 0o777 == 0o600


def test_fl_identities(tmp_path, capsys):
    argv = ["fl", "identities", tmp_path, "--parties", "3"]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "identity-2.key")
    # every replaced key is named
    code, text = _run(capsys, *argv, "--force")
    assert code == 0 and all(str(tmp_path / f"identity-{i}.key") in text for i in range(3))


def test_fl_certs(tmp_path, capsys):
    argv = ["fl", "certs", tmp_path]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "server.key")


def test_fl_split_and_app_refuse_a_non_empty_out(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(HYBRID.replace('strategy = "hybrid"', 'strategy = "fedavg"')
                      .replace("[hybrid]\nhonest = 2\nkey_bits = 256\ninsecure_ok = true\n", ""))
    for argv in (["fl", "split", config, "--out", tmp_path / "split"],
                 ["fl", "app", config, "--out", tmp_path / "app"]):
        assert _run(capsys, *argv)[0] == 0
        code, text = _run(capsys, *argv)
        assert code == 2 and "not empty" in text and "--force" in text
        assert _run(capsys, *argv, "--force")[0] == 0


def test_net_certs(tmp_path, capsys):
    hosts = _hosts(tmp_path, certs=False)
    argv = ["net", "certs", "--hosts", hosts]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "certs" / "p0.key")


def test_net_ca_csr_sign(tmp_path, capsys):
    hosts = _hosts(tmp_path, certs=False)
    argv = ["net", "ca", "--hosts", hosts]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "certs" / "ca.key")
    org = tmp_path / "org"
    argv = ["net", "csr", "--name", "p0", "--host", "127.0.0.1", "--out", org]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, org / "p0.key")
    argv = ["net", "sign", org / "p0.csr", "--hosts", hosts]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, org / "p0.crt")


def test_keygen_names_the_share_it_replaced(tmp_path, capsys, monkeypatch):
    """``veil keygen``: refused before any party is contacted; the share replaced with
    --force is named (the key generation itself is tests/net's: a dealt share here)."""
    from veil.crypto import hosts as crypto_hosts
    from veil.crypto.threshold import keygen

    hosts = _hosts(tmp_path)
    shares = keygen(256, 2, 2, insecure_ok=True)[1]
    calls = []

    def fake_keygen(hosts_, identity, **kw):
        calls.append(identity.name)
        return shares[len(calls) % 2], {"seconds": 0.0, "sent": 0, "rounds": 0}

    monkeypatch.setattr(crypto_hosts, "keygen_on_hosts", fake_keygen)
    out = tmp_path / "share.key"
    argv = ["keygen", "--hosts", hosts, "--party", "0", "--honest", "1", "--bits", "256",
            "--insecure-ok", "--out", out]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, out)
    assert len(calls) == 2     # the refused run contacted nobody


def test_he_keygen_refuses_before_making_a_key(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tenseal", reason="CKKS needs the 'fhe' extra (tenseal)")
    from veil.he.ckks import CKKSContext

    argv = ["he", "keygen", "--out", tmp_path, "--preset", "depth2"]
    assert _run(capsys, *argv)[0] == 0
    made = []
    original = CKKSContext.preset.__func__

    def counting(cls, *args, **kwargs):
        made.append(args)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(CKKSContext, "preset", classmethod(counting))
    _refused_then_forced(capsys, argv, tmp_path / "secret.ctx")
    assert len(made) == 1      # the refused run made no key
    code, text = _run(capsys, *argv, "--force")
    assert code == 0 and str(tmp_path / "public.ctx") in text


def test_he_outputs_are_replaced_only_with_force(tmp_path, capsys):
    pytest.importorskip("tenseal", reason="CKKS needs the 'fhe' extra (tenseal)")
    assert _run(capsys, "he", "keygen", "--out", tmp_path, "--preset", "depth2")[0] == 0
    (tmp_path / "train.csv").write_text("a,b,y\n1,2,3\n2,1,4\n3,3,7\n")
    argv = ["he", "encrypt", "--key", tmp_path / "secret.ctx", "--data", tmp_path / "train.csv",
            "--target", "y", "--out", tmp_path / "train.enc"]
    assert _run(capsys, *argv)[0] == 0
    _refused_then_forced(capsys, argv, tmp_path / "train.enc")


def test_psi_out_is_refused_before_any_party_is_contacted(tmp_path, capsys):
    hosts = _hosts(tmp_path, certs=False)      # no certificates: nothing could connect
    (tmp_path / "ids.csv").write_text("id\na\nb\n")
    out = tmp_path / "both.csv"
    out.write_text("id\nkept\n")
    code, text = _run(capsys, "psi", "--hosts", hosts, "--party", "0", "--role", "receiver",
                      "--ids", tmp_path / "ids.csv", "--out", out)
    assert code == 2 and str(out) in text and "--force" in text
    assert out.read_text() == "id\nkept\n"


def test_anatomy_never_replaces_its_sensitive_table_silently(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("age,sex,disease\n" + "".join(
        f"{20 + i % 40},{'MF'[i % 2]},{['flu', 'ulcer', 'cancer'][i % 3]}\n"
        for i in range(60)))
    sensitive = tmp_path / "out_sensitive.csv"
    sensitive.write_text("kept\n")
    argv = ["anonymize", table, "--qi", "age", "--qi", "sex", "--sensitive", "disease",
            "--l", "3", "--algorithm", "anatomy", "--out", tmp_path / "out.csv"]
    code, text = _run(capsys, *argv)
    assert code == 2 and str(sensitive) in text
    assert sensitive.read_text() == "kept\n" and not (tmp_path / "out.csv").exists()
    assert _run(capsys, *argv, "--force")[0] == 0
    assert sensitive.read_text() != "kept\n"
