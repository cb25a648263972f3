"""The parties of a vertical run take VerticalSettings, not a run file's section: the
language of ``[vertical]`` (its keys, types and defaults) is read once, in
veil.experiments.vertical_config, and the parties on their nodes, the local run and the
Flower relay all read the same object."""

from __future__ import annotations

import pandas as pd
import pytest

from veil.errors import ConfigError
from veil.experiments.vertical_config import flower_settings, vertical_settings
from veil.fl.vertical.paillier_lr import Plan
from veil.fl.vertical.parties import VerticalParty, VerticalSettings, nodes_of

PARTIES = {"bank": "bank.csv", "insurer": "insurer.csv"}


def test_a_section_becomes_settings_with_the_defaults_of_its_model():
    logistic = vertical_settings({"parties": PARTIES, "epochs": 3, "clip": [1.0, 2.0]})
    assert logistic.parties == ("bank", "insurer") and logistic.clip == (1.0, 2.0)
    assert Plan(task="logistic", **logistic.schedule()) == Plan(
        task="logistic", epochs=3, batch_size=256, learning_rate=0.15)
    split = vertical_settings({"parties": PARTIES, "model": "split"})
    assert split.rate == 1e-3 and nodes_of(split) == ["bank", "insurer"]
    assert nodes_of(logistic) == ["bank", "insurer", "arbiter"]
    # what the parties compare and sign: plain data, the same from the same file
    assert logistic.message() == vertical_settings(
        {"parties": PARTIES, "epochs": 3, "clip": [1.0, 2.0]}).message()
    assert logistic.message()["vertical"]["parties"] == ["bank", "insurer"]


def test_a_party_refuses_a_section_in_place_of_settings():
    """The old interface: a party read its own TOML section (a copy of the language's
    constants in the fl layer). A dict is now a ConfigError, before anything is built."""
    with pytest.raises(ConfigError, match="expected VerticalSettings"):
        VerticalParty("arbiter", {"parties": PARTIES}, None)
    party = VerticalParty("arbiter", VerticalSettings(parties=("bank", "insurer")), None)
    assert party.describe() == {"party": "arbiter", "role": "arbiter", "columns": [],
                                "rows": 0}


@pytest.mark.parametrize("section, match", [
    ({"parties": PARTIES, "protocol": "ss"}, "protocol='ss' does not run on Flower"),
    ({"parties": {"arbiter": "a.csv", "b": "b.csv"}}, "may not name a party 'arbiter'"),
    ({"parties": {"bank": "bank.csv"}}, "at least two party names"),
    ({"parties": PARTIES, "dataset": "adult"}, "dataset does not run on Flower"),
    ({"parties": PARTIES, "epoch": 3}, "unknown settings"),
])
def test_what_flower_cannot_run_is_refused_by_name(section, match):
    with pytest.raises(ConfigError, match=match):
        flower_settings(section)


def test_a_party_checks_its_table_against_the_settings():
    settings = VerticalSettings(parties=("bank", "insurer"), label="y")
    table = pd.DataFrame({"id": ["a", "b"], "x": [1.0, 2.0]})
    with pytest.raises(ConfigError, match="not one of the run's parties"):
        VerticalParty("telco", settings, table)


def test_every_key_of_the_section_is_a_setting_or_a_file():
    """One schema: a [vertical] key the settings do not hold (and that names no file or
    data set) would be checked, then silently dropped."""
    from dataclasses import fields

    from veil.experiments.vertical_config import FILE_KEYS, SECTIONS

    settings = {f.name for f in fields(VerticalSettings)} - {"parties"}
    assert set(SECTIONS["vertical"]) == settings | FILE_KEYS
    assert not settings & FILE_KEYS
