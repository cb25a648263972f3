import pandas as pd
import pytest

from veil.anon import Hierarchy, KAnonymity, LDiversity, TCloseness, anonymize
from veil.errors import ConfigError, DataError


def test_input_is_never_modified(table):
    df, hierarchies = table
    before = df.copy()
    anonymize(df, hierarchies, "disease", [KAnonymity(5), LDiversity(2)])
    anonymize(df, {**hierarchies, "age": None, "zip": None}, "disease",
              [KAnonymity(5), LDiversity(2)], algorithm="mondrian")
    anonymize(df, ["age"], models=[KAnonymity(5)], algorithm="mdav")
    anonymize(df, list(hierarchies), "disease", [LDiversity(2)], algorithm="anatomy", rng=1)
    pd.testing.assert_frame_equal(df, before)


def test_result_holds_table_levels_classes_metrics(table):
    df, hierarchies = table
    result = anonymize(df, hierarchies, "disease", [KAnonymity(5), TCloseness(0.4)])
    assert list(result.table.columns) == list(df.columns)
    assert set(result.levels) == set(hierarchies)
    assert result.classes["size"].sum() == len(df) - result.suppressed
    assert result.classes["size"].min() == result.metrics["k"] >= 5
    assert result.metrics["t"] <= 0.4
    for key in ("entropy", "discernibility", "aecs", "loss", "precision", "highest_risk",
                "average_risk", "records_at_risk", "l_distinct", "l_entropy"):
        assert key in result.metrics
    assert result.metrics["highest_risk"] == pytest.approx(1 / result.metrics["k"])


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"algorithm": "magic"}, ConfigError, "algorithm='magic'"),
    ({"metric": "beauty"}, ConfigError, "metric='beauty'"),
    ({"suppression_limit": 1.5}, ConfigError, "suppression_limit=1.5"),
    ({"suppression_limit": 0.1, "algorithm": "mondrian"}, ConfigError, "only 'optimal'"),
    ({"models": []}, ConfigError, "non-empty"),
    ({"models": [LDiversity(2)], "sensitive": None}, ConfigError, "needs a sensitive"),
    ({"sensitive": "age"}, ConfigError, "also a quasi-identifier"),
    ({"sensitive": "nope"}, DataError, "'nope' is not in the table"),
    ({"models": [KAnonymity(2), LDiversity(2)], "algorithm": "mdav"}, ConfigError, "mdav"),
    ({"models": [KAnonymity(2)], "algorithm": "anatomy"}, ConfigError, "LDiversity"),
])
def test_bad_parameters(table, kwargs, error, match):
    df, hierarchies = table
    args = {"sensitive": "disease", "models": [KAnonymity(2)]} | kwargs
    with pytest.raises(error, match=match):
        anonymize(df, hierarchies, **args)


def test_bad_data(table):
    df, hierarchies = table
    with pytest.raises(DataError, match="empty"):
        anonymize(df.iloc[:0], hierarchies, models=[KAnonymity(2)])
    odd = df.copy()
    odd.loc[3, "job"] = "pilot"
    with pytest.raises(DataError, match="value 'pilot' of column 'job' is missing"):
        anonymize(odd, hierarchies, models=[KAnonymity(2)])
    holes = df.copy()
    holes.loc[0, "zip"] = None
    with pytest.raises(DataError, match="'zip' holds 1 missing"):
        anonymize(holes, hierarchies, models=[KAnonymity(2)])
    no_hierarchy = dict(hierarchies, job=None)
    with pytest.raises(ConfigError, match="'job' has none"):
        anonymize(df, no_hierarchy, models=[KAnonymity(2)])
    with pytest.raises(DataError, match="mdav.*'zip'"):
        anonymize(df.assign(zip="x" + df["zip"]), ["age", "zip"], models=[KAnonymity(2)],
                  algorithm="mdav")


def test_hierarchies_may_be_given_as_rows(table):
    df, hierarchies = table
    rows = {c: h.to_frame() for c, h in hierarchies.items()}
    a = anonymize(df, rows, models=[KAnonymity(4)])
    b = anonymize(df, hierarchies, models=[KAnonymity(4)])
    assert a.levels == b.levels
    with pytest.raises(ConfigError, match="pass a Hierarchy"):
        anonymize(df, {"age": 5}, models=[KAnonymity(4)])
    assert isinstance(hierarchies["age"], Hierarchy)


def test_sensitive_hierarchy_missing_a_value_names_the_column(table):
    df, hierarchies = table
    partial = Hierarchy([["flu", "respiratory", "*"], ["bronchitis", "respiratory", "*"],
                         ["pneumonia", "respiratory", "*"], ["gastritis", "stomach", "*"],
                         ["ulcer", "stomach", "*"]])                # no 'cancer', no name
    with pytest.raises(DataError, match="value 'cancer' of column 'disease' is missing"):
        anonymize(df, hierarchies, "disease", [KAnonymity(2), TCloseness(0.3,
                                                                        hierarchy=partial)])


def test_mondrian_refuses_a_hierarchy_for_a_numeric_column(table):
    df, hierarchies = table
    with pytest.raises(ConfigError, match=r"quasi_identifiers\['age'\]: a hierarchy was "
                                          r"given for a numeric column.*'age': None"):
        anonymize(df, hierarchies, "disease", [KAnonymity(5)], algorithm="mondrian")


def test_monotonic_option_is_checked(table):
    df, hierarchies = table
    with pytest.raises(ConfigError, match="monotonic='yes' is not allowed"):
        anonymize(df, hierarchies, models=[KAnonymity(2)], monotonic="yes")
    with pytest.raises(ConfigError, match="monotonic=True is not allowed with "
                                          "metric='aecs'"):
        anonymize(df, hierarchies, models=[KAnonymity(2)], metric="aecs", monotonic=True)
