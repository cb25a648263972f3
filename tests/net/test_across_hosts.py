"""MPC, PSI and dealer-free key generation between processes that only know each other's
address and certificate (mutual TLS on loopback), started through the ``veil`` command."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from veil.cli.main import main
from veil.crypto.serialization import load_key_share
from veil.errors import ProtocolError
from veil.mpc import Session, concatenate
from veil.mpc.models import LogisticRegression
from veil.net.certs import issue

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="forks party processes")


def _split_data(folder):
    X, y = load_breast_cancer(return_X_y=True)
    X, y = ((X - X.mean(0)) / X.std(0))[:160, :6], y[:160]
    parts = [(X[:80], y[:80].astype(float)), (X[80:], y[80:].astype(float))]
    for i, (a, b) in enumerate(parts):
        np.save(folder / f"X{i}.npy", a)
        np.savetxt(folder / f"y{i}.csv", b, header="label", comments="", fmt="%d")
    return parts


def _logreg(s):
    X = concatenate([s.share_data("X", owner=i) for i in range(2)], axis=0)
    y = concatenate([s.share_data("y", owner=i) for i in range(2)], axis=0)
    model = LogisticRegression(learning_rate=1.0, max_iter=4).fit(X, y).reveal()
    return model.coef_, model.intercept_, s.cost()


def _parties(forks, hosts, folder, n=2):
    return [forks.start(["mpc", "party", "--hosts", str(hosts), "--party", str(i), "--data",
                         f"X={folder}/X{i}.npy", "--data", f"y={folder}/y{i}.csv",
                         "--timeout", "60"], f"party{i}") for i in range(n)]


def test_logistic_regression_across_hosts_matches_the_local_runtime(tmp_path, hosts_file,
                                                                    forks):
    parts = _split_data(tmp_path)
    hosts = hosts_file(2)
    procs = _parties(forks, hosts, tmp_path)
    with Session(runtime="hosts", hosts=hosts, rng=5, timeout=30) as s:
        remote = _logreg(s)
    for proc in procs:
        code, out = forks.join(proc)
        assert code == 0, out
        assert "MPC session ended" in out
    data = {i: {"X": parts[i][0], "y": parts[i][1]} for i in range(2)}
    with Session(parties=2, rng=5, data=data) as s:
        local = _logreg(s)
    np.testing.assert_array_equal(remote[0], local[0])
    assert remote[1] == local[1]
    assert remote[2] == local[2]          # the same rounds and bytes per party
    assert np.all(np.isfinite(remote[0])) and np.any(remote[0] != 0)


def test_a_party_killed_mid_session_is_named(tmp_path, hosts_file, forks):
    _split_data(tmp_path)
    hosts = hosts_file(2)
    procs = _parties(forks, hosts, tmp_path)
    with Session(runtime="hosts", hosts=hosts, timeout=10) as s:
        x = s.share_data("X", owner=0)
        os.kill(procs[1].pid, signal.SIGKILL)
        with pytest.raises(ProtocolError, match=r"party 1 \(p1 at 127.0.0.1:\d+\)"):
            (x * x).sum().reveal()
    code, out = forks.join(procs[0], timeout=30)   # the survivor is told, not left hanging
    assert code == 2 and "party 1 (p1 at 127.0.0.1" in out, out


def test_psi_across_hosts(tmp_path, hosts_file, forks):
    hosts = hosts_file(2, driver=None)
    (tmp_path / "a.csv").write_text("id,x\n" + "".join(f"u{i},{i}\n" for i in range(0, 60, 2)))
    (tmp_path / "b.csv").write_text("id\n" + "".join(f"u{i}\n" for i in range(0, 60, 3)))
    out = tmp_path / "common.csv"
    receiver = forks.start(["psi", "--hosts", str(hosts), "--party", "p0", "--role",
                            "receiver", "--ids", str(tmp_path / "a.csv"), "--out", str(out)],
                           "receiver")
    sender = forks.start(["psi", "--hosts", str(hosts), "--party", "1", "--role", "sender",
                          "--ids", str(tmp_path / "b.csv"), "--max-request", "30"], "sender")
    for proc in (receiver, sender):
        code, log = forks.join(proc)
        assert code == 0, log
    assert out.read_text().split() == ["id"] + [f"u{i}" for i in range(0, 60, 6)]
    assert "receiver's set size only" in forks.join(sender)[1]


def _keygen(forks, hosts, folder, i, before=None):
    return forks.start(["keygen", "--hosts", str(hosts), "--party", str(i), "--bits", "384",
                        "--honest", "2", "--insecure-ok", "--timeout", "60",
                        "--out", str(folder / f"share{i}.bin")], f"keygen{i}", before)


def test_keygen_across_three_hosts(tmp_path, hosts_file, forks):
    """A 384-bit key: a test size (--insecure-ok); real keys have >= 2048 bits."""
    hosts = hosts_file(3, driver=None)
    procs = [_keygen(forks, hosts, tmp_path, i) for i in range(3)]
    for proc in procs:
        code, out = forks.join(proc, timeout=240)
        assert code == 0, out
    shares = [load_key_share((tmp_path / f"share{i}.bin").read_bytes(), insecure_ok=True)
              for i in range(3)]
    assert [s.index for s in shares] == [1, 2, 3]
    assert len({s.public_key.fingerprint for s in shares}) == 1
    assert all(oct((tmp_path / f"share{i}.bin").stat().st_mode & 0o777) == "0o600"
               for i in range(3))
    pk = shares[0].public_key
    c = pk.encrypt(424242)
    for pair in ((0, 1), (1, 2), (0, 2)):
        assert pk.combine([shares[i].partial_decrypt(c) for i in pair]) == 424242


def _die_after(messages: int):
    """Plant a crash: this process kills itself (SIGKILL) at its n-th received message."""
    def plant():
        from veil.crypto.dkg import KeygenParty
        original, count = KeygenParty.receive, [0]

        def receive(self, sender, message):
            count[0] += 1
            if count[0] == messages:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, sender, message)
        KeygenParty.receive = receive
    return plant


def test_keygen_party_killed_mid_protocol(tmp_path, hosts_file, forks):
    hosts = hosts_file(3, driver=None)
    procs = [_keygen(forks, hosts, tmp_path, i, _die_after(9) if i == 2 else None)
             for i in range(3)]
    code, _ = forks.join(procs[2], timeout=120)
    assert code == -signal.SIGKILL
    for proc in procs[:2]:
        code, out = forks.join(proc, timeout=120)
        assert code == 2, out
        assert "party 2 (p2 at 127.0.0.1" in out and "left" in out
    assert sorted(p.name for p in tmp_path.iterdir() if "share" in p.name) == []


def test_keygen_bad_input_writes_nothing(tmp_path, hosts_file, capsys):
    hosts = hosts_file(3, driver=None)
    issue(tmp_path / "other", {"p1": ()})
    out = tmp_path / "share.bin"
    base = ["keygen", "--hosts", str(hosts), "--bits", "384", "--honest", "2",
            "--insecure-ok", "--out", str(out), "--timeout", "2"]
    cases = [
        (["--party", "1", "--cert", str(tmp_path / "other" / "p1.crt"), "--key",
          str(tmp_path / "other" / "p1.key")], "not signed by the session's CA"),
        (["--party", "1", "--cert", str(tmp_path / "certs" / "p0.crt"), "--key",
          str(tmp_path / "certs" / "p0.key")], "certificate of 'p0', not of 'p1'"),
        (["--party", "7"], "--party='7' is not allowed"),
        (["--party", "0", "--honest", "4"], "honest (t)=4 is not allowed: must be an integer "
                                             "in [1, 3] (the hosts file has 3 parties)"),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2
        assert message in capsys.readouterr().err.replace("\n", " ")
        assert not out.exists()
    bad = tmp_path / "bad.toml"
    bad.write_text(hosts.read_text().replace("index = 2", "index = 1"))
    assert main(["keygen", "--hosts", str(bad), "--party", "0", "--honest", "2",
                 "--out", str(out)]) == 2
    assert "party[2].index=1" in capsys.readouterr().err
    assert not out.exists()


def test_the_commands_end_to_end(tmp_path, hosts_file, forks, capsys):
    """``veil net certs`` issues the certificates, ``veil mpc logreg`` drives the session."""
    import json

    parts = _split_data(tmp_path)
    hosts = hosts_file(2, certs=False)
    assert main(["net", "certs", "--hosts", str(hosts)]) == 0
    assert (tmp_path / "certs" / "analyst.key").stat().st_mode & 0o777 == 0o600
    assert main(["net", "certs", "--hosts", str(hosts)]) == 2     # never replaces a CA
    capsys.readouterr()
    procs = _parties(forks, hosts, tmp_path)
    assert main(["mpc", "logreg", "--hosts", str(hosts), "--max-iter", "4", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    for proc in procs:
        assert forks.join(proc)[0] == 0
    data = {i: {"X": parts[i][0], "y": parts[i][1]} for i in range(2)}
    with Session(parties=2, rng=5, data=data) as s:
        coef, intercept, _ = _logreg(s)
    assert got["rows"] == 160 and got["features"] == 6
    np.testing.assert_allclose(got["coef"], coef, atol=1e-3)
    assert abs(got["intercept"] - intercept) < 1e-3
