"""Hosts files: every mistake is a ConfigError naming the file, the key and the value."""

from __future__ import annotations

import pytest

from veil.errors import ConfigError
from veil.net import load_hosts

GOOD = """session = "s"
ca = "ca.crt"
driver = "analyst"

[[party]]
index = 0
name = "hospital-a"
address = "127.0.0.1:7001"

[[party]]
index = 1
name = "hospital-b"
address = "[::1]:7002"
"""


def _write(tmp_path, text):
    (tmp_path / "ca.crt").write_text("placeholder: load_hosts only checks that it exists")
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def test_a_good_file_loads(tmp_path):
    hosts = load_hosts(_write(tmp_path, GOOD))
    assert hosts.session == "s" and hosts.driver == "analyst" and len(hosts) == 2
    assert hosts.party(1).host == "::1" and hosts.party("hospital-a").port == 7001
    assert hosts.party("1").name == "hospital-b"
    assert hosts.cert_paths("hospital-a")[0] == tmp_path / "hospital-a.crt"
    other = load_hosts(_write(tmp_path, GOOD.replace('session = "s"', 'session = "t"')))
    assert other.digest() != hosts.digest()


@pytest.mark.parametrize("old, new, match", [
    ('session = "s"\n', "", "session=None"),
    ('ca = "ca.crt"', 'ca = "missing.crt"', "ca='missing.crt'.*no such file"),
    ('driver = "analyst"', 'driver = "hospital-a"', "driver='hospital-a'.*not also a party"),
    ('driver = "analyst"', 'driver = "a b"', "driver='a b'"),
    ("index = 1", "index = 0", r"party\[1\].index=0.*once"),
    ("index = 1", "index = 2", r"party\[1\].index=2.*0..1"),
    ("index = 1", 'index = "1"', r"party\[1\].index='1'"),
    ('name = "hospital-b"', 'name = "hospital-a"', r"party\[1\].name='hospital-a'.*once"),
    ('name = "hospital-b"', 'name = "../etc"', r"party\[1\].name='../etc'"),
    ('"[::1]:7002"', '"127.0.0.1:7001"', r"party\[1\].address.*once"),
    ('"[::1]:7002"', '"host-without-port"', r"party\[1\].address='host-without-port'"),
    ('"[::1]:7002"', '"h:70000"', r"party\[1\].address='h:70000'.*1..65535"),
    ('driver = "analyst"', 'driver = "analyst"\nport = 3', "port=3"),
])
def test_mistakes_name_the_key(tmp_path, old, new, match):
    assert old in GOOD
    with pytest.raises(ConfigError, match=match):
        load_hosts(_write(tmp_path, GOOD.replace(old, new)))


def test_one_party_or_bad_toml_or_no_file(tmp_path):
    one = GOOD[:GOOD.index("[[party]]\nindex = 1")]
    with pytest.raises(ConfigError, match=r"party=.*2..64"):
        load_hosts(_write(tmp_path, one))
    with pytest.raises(ConfigError, match="cannot be read"):
        load_hosts(_write(tmp_path, "session = \n"))
    with pytest.raises(ConfigError, match="--hosts=.*no such file"):
        load_hosts(tmp_path / "nope.toml")


def test_unknown_party(tmp_path):
    hosts = load_hosts(_write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match=r"--party=5 is not allowed.*0 \(hospital-a\), "
                                          r"1 \(hospital-b\)"):
        hosts.party(5)
