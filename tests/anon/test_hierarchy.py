import numpy as np
import pandas as pd
import pytest

from veil.anon import Hierarchy
from veil.anon.hierarchy import sniff_separator, value_keys
from veil.errors import ConfigError, DataError


def test_arx_file_round_trip(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("Male;*\nFemale;*\n")
    h = Hierarchy.from_csv(path, name="sex")
    assert h.n_levels == 2 and h.height == 1 and len(h) == 2
    assert list(h.generalize(["Female", "Male"], 1)) == ["*", "*"]
    out = tmp_path / "out.csv"
    h.to_csv(out)
    assert out.read_text() == path.read_text()


def test_separator_is_detected(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("a,x,*\nb,x,*\nc,y,*\n")
    assert Hierarchy.from_csv(path).labels(1).tolist() == ["x", "x", "y"]
    assert sniff_separator("a;b;c\nd;e;f\n") == ";"


def test_ragged_rows_are_rejected(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("a;x;*\nb;*\n")
    with pytest.raises(DataError, match="ragged rows: row 2"):
        Hierarchy.from_csv(path)
    with pytest.raises(DataError, match="ragged"):
        Hierarchy([["a", "x", "*"], ["b", "*"]])


def test_not_a_tree_is_rejected():
    with pytest.raises(DataError, match="not a tree: label 'x' at level 1"):
        Hierarchy([["a", "x", "p", "*"], ["b", "x", "q", "*"]])


def test_duplicate_and_empty_cells_are_rejected():
    with pytest.raises(DataError, match="'a' more than once"):
        Hierarchy([["a", "*"], ["a", "*"]])
    with pytest.raises(DataError, match="empty cell"):
        Hierarchy([["a", ""], ["b", "*"]])


def test_missing_value_names_value_and_column():
    h = Hierarchy([["Male", "*"], ["Female", "*"]], name="sex")
    with pytest.raises(DataError, match=r"value 'Other' of column 'sex' is missing"):
        h.positions(pd.Series(["Male", "Other"]))


def test_intervals_nest_and_use_arx_labels():
    h = Hierarchy.intervals(range(17, 91), [5, 10, 20], name="age")
    assert h.generalize([17, 39, 90], 1).tolist() == ["15-19", "35-39", "90-94"]
    assert h.generalize([17, 39, 90], 2).tolist() == ["10-19", "30-39", "90-99"]
    assert h.generalize([17, 39, 90], 3).tolist() == ["0-19", "20-39", "80-99"]
    assert set(h.labels(4)) == {"*"}
    real = Hierarchy.intervals([0.5, 1.5, 2.25], [0.5, 1.0])
    assert real.generalize([2.25], 1).tolist() == ["[2, 2.5)"]


def test_intervals_reject_widths_that_do_not_nest():
    with pytest.raises(ConfigError, match="multiple"):
        Hierarchy.intervals(range(10), [5, 7])
    with pytest.raises(ConfigError, match="positive"):
        Hierarchy.intervals(range(10), [0])


def test_masking_zip_codes():
    h = Hierarchy.masking(["47677", "47602", "47905"], name="zip")
    assert h.n_levels == 6
    assert h.generalize(["47677"], 2).tolist() == ["476**"]
    assert h.generalize(["47677", "47905"], 3).tolist() == ["47***", "47***"]
    assert h.generalize(["47905"], 5).tolist() == ["*"]


def test_numbers_are_keyed_without_trailing_zero():
    assert value_keys(pd.Series([39.0, 40.0])).tolist() == ["39", "40"]
    assert value_keys(pd.Series([0.5])).tolist() == ["0.5"]
    h = Hierarchy([["39", "*"], ["40", "*"]])
    assert h.positions(pd.Series([40, 39, 40])).tolist() == [1, 0, 1]
    assert h.positions(np.array([39.0])).tolist() == [0]


def test_bad_level():
    h = Hierarchy([["a", "*"]])
    with pytest.raises(ConfigError, match="level=2"):
        h.labels(2)


def test_adult_hierarchies_load(adult):
    _, hierarchies = adult
    assert {c: h.n_levels for c, h in hierarchies.items()} == {
        "sex": 2, "age": 5, "race": 2, "marital-status": 3, "education": 4,
        "native-country": 3, "workclass": 3, "salary-class": 2}
