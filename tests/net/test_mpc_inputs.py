"""A party's own data, shared by name; and the mistakes a driver or a party can make."""

from __future__ import annotations

import numpy as np
import pytest

from veil.cli.mpc import load_data
from veil.errors import ConfigError, DataError, ProtocolError
from veil.mpc import Session


def test_share_data_keeps_values_with_their_owner():
    x = np.array([[1.5, -2.0], [0.25, 4.0]])
    counts = np.array([3, 4])
    with Session(parties=2, rng=1, data={0: {"x": x}, 1: {"n": counts}}) as s:
        a, n = s.share_data("x", owner=0), s.share_data("n", owner=1)
        assert a.shape == (2, 2) and n.frac == 0 and a.frac == s.frac_bits
        np.testing.assert_allclose(a.sum(axis=1).reveal(), x.sum(axis=1), atol=1e-4)
        assert np.array_equal(n.reveal(), counts)
        with pytest.raises(ProtocolError, match=r"party 0 holds no data named 'y' \(it "
                                                r"holds: x\)"):
            s.share_data("y", owner=0)


def test_driver_mistakes(tmp_path, hosts_file):
    with pytest.raises(ConfigError, match="owner=2"):
        Session(parties=2, data={0: {}}).share_data("x", owner=2)
    with pytest.raises(ConfigError, match="data= is not allowed with runtime='process'"):
        Session(parties=2, runtime="process", data={0: {"x": np.ones(2)}})
    with pytest.raises(ConfigError, match="runtime='hosts' needs hosts=PATH"):
        Session(runtime="hosts")
    with pytest.raises(ConfigError, match="driver is missing"):
        Session(runtime="hosts", hosts=hosts_file(2, driver=None))
    with pytest.raises(ConfigError, match="parties=3 is not allowed: the hosts file"):
        Session(parties=3, runtime="hosts", hosts=hosts_file(2))
    with pytest.raises(ConfigError, match="hosts=.* is not allowed with runtime='local'"):
        Session(parties=2, hosts="hosts.toml")


def test_party_data_files(tmp_path):
    (tmp_path / "a.csv").write_text("u,v\n1,2.5\n3,4\n")
    (tmp_path / "b.csv").write_text("label\n0\n1\n")
    (tmp_path / "c.csv").write_text("name\nalice\n")
    np.save(tmp_path / "d.npy", np.arange(3))
    got = load_data([f"X={tmp_path}/a.csv", f"y={tmp_path}/b.csv", f"d={tmp_path}/d.npy"])
    assert got["X"].shape == (2, 2) and got["y"].tolist() == [0, 1] and got["d"].shape == (3,)
    with pytest.raises(ConfigError, match="NAME=FILE"):
        load_data(["justafile.csv"])
    with pytest.raises(ConfigError, match="'X' is named twice"):
        load_data([f"X={tmp_path}/a.csv", f"X={tmp_path}/b.csv"])
    with pytest.raises(DataError, match="not numbers"):
        load_data([f"n={tmp_path}/c.csv"])
    with pytest.raises(DataError, match="not an existing file"):
        load_data([f"n={tmp_path}/none.csv"])
