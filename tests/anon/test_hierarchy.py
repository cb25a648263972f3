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


def test_arx_files_are_semicolon_separated_with_commas_in_labels(tmp_path):
    """ARX's own hierarchies hold commas in labels (``[0,4]``): never split on them."""
    path = tmp_path / "age.csv"
    path.write_text("1;[0,4];*\n2;[0,4];*\n7;[5,9];*\n")
    h = Hierarchy.from_csv(path)
    assert h.n_levels == 3 and h.labels(1).tolist() == ["[0,4]", "[0,4]", "[5,9]"]
    fars = tmp_path / "injury.csv"
    fars.write_text("No;0-1;*\nFatal Injury;2-3;*\nInj, Sev Unk;2-3;*\n")
    assert Hierarchy.from_csv(fars).values.tolist() == ["No", "Fatal Injury", "Inj, Sev Unk"]


def test_other_separators_are_explicit(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("a,x,*\nb,x,*\nc,y,*\n")
    with pytest.raises(DataError, match=r"has no ';' separator but every row holds ','.*"
                                        r"sep=','.*--hierarchy-sep"):
        Hierarchy.from_csv(path)
    assert Hierarchy.from_csv(path, sep=",").labels(1).tolist() == ["x", "x", "y"]
    with pytest.raises(ConfigError, match="sep=';;' is not allowed"):
        Hierarchy.from_csv(path, sep=";;")
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


def test_repeated_rows_are_accepted_conflicting_ones_refused():
    h = Hierarchy([["a", "x", "*"], ["b", "x", "*"], ["a", "x", "*"]])    # as ARX accepts
    assert h.values.tolist() == ["a", "b"] and h.labels(1).tolist() == ["x", "x"]
    with pytest.raises(DataError, match=r"'a' twice with different generalizations: row 1 "
                                        r"\['a', 'x', '\*'\] and row 3 \['a', 'y', '\*'\]"):
        Hierarchy([["a", "x", "*"], ["b", "x", "*"], ["a", "y", "*"]])


def test_values_print_plainly():
    """numpy strings print as 'Bachelors', not np.str_('Bachelors')."""
    h = Hierarchy(np.array([["Bachelors", "x"], ["Masters", "x"]]), name="education")
    assert type(h.values[0]) is str
    with pytest.raises(DataError) as info:
        h.positions(np.array(["Bachelors", "PhD"]))
    assert "value 'PhD' of column 'education'" in str(info.value)
    assert "np.str_" not in str(info.value)
    assert type(value_keys(np.array(["Bachelors"]))[0]) is str
    with pytest.raises(DataError) as info:
        Hierarchy(np.array([["a", "x", "p"], ["b", "x", "q"]]))
    assert "label 'x' at level 1 generalizes to ['p', 'q']" in str(info.value)


def test_empty_cells_are_rejected():
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
