import json

from veil.cli.main import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("veil ")


def test_datasets_list_json(capsys):
    assert main(["datasets", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= {"adult", "nursery", "digits"}


def test_unknown_command_exits_nonzero(capsys):
    assert main(["no-such-command"]) != 0
