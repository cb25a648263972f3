import itertools

import pytest

from veil.anon import Rule, association_rules, hide_rules
from veil.anon.rules import frequent_itemsets, transactions_from_frame
from veil.errors import ConfigError
from veil.random import default_rng

# supports: a 8, b 6, c 8, d 10, ab 6, cd 6 (n = 20)
BASKETS = ([{"a", "b"}] * 6 + [{"a"}] * 2 + [{"c", "d"}] * 6 + [{"c"}] * 2 + [{"d"}] * 4)
SUP, CONF = 0.25, 0.7


def _keys(rules):
    return {(tuple(sorted(r.antecedent)), tuple(sorted(r.consequent))) for r in rules}


def test_apriori_matches_brute_force():
    rng = default_rng(2)
    items = list("abcdefg")
    data = [frozenset(i for i in items if rng.random() < 0.45) for _ in range(120)]
    found = frequent_itemsets(data, 0.1)
    for size in range(1, len(items) + 1):
        for combo in itertools.combinations(items, size):
            count = sum(1 for t in data if set(combo) <= t)
            if count >= 12:
                assert found[frozenset(combo)] == count
            else:
                assert frozenset(combo) not in found


def test_rules_of_the_baskets():
    rules = association_rules(BASKETS, SUP, CONF)
    assert _keys(rules) == {(("a",), ("b",)), (("b",), ("a",)), (("c",), ("d",))}
    ab = next(r for r in rules if r.antecedent == {"a"})
    assert ab.support == pytest.approx(0.3) and ab.confidence == pytest.approx(0.75)


@pytest.mark.parametrize("method", ["distortion", "blocking"])
def test_hiding_removes_exactly_the_sensitive_rule(method):
    result = hide_rules(BASKETS, [({"a"}, {"b"})], SUP, CONF, method=method)
    before, after = _keys(result.rules_before), _keys(result.rules_after)
    assert after == before - {(("a",), ("b",))}
    assert _keys(result.hidden) == {(("a",), ("b",))}
    assert result.lost == [] and result.ghost == []
    assert result.changed == 1          # conf 5/8 < 0.7 after one change
    blocked = [u for u in result.unknown if u]
    assert blocked == ([frozenset({"b"})] if method == "blocking" else [])


def test_side_effects_are_reported():
    # hiding b => a needs two deletions of a, which also drops a => b below support
    result = hide_rules(BASKETS, [Rule(frozenset("b"), frozenset("a"))], SUP, CONF)
    assert _keys(result.hidden) == {(("b",), ("a",))}
    assert _keys(result.lost) == {(("a",), ("b",))}
    assert _keys(result.rules_after) == {(("c",), ("d",))}


def test_hiding_on_a_random_table_hides_every_sensitive_rule(table):
    df, _ = table
    data = transactions_from_frame(df.assign(age=(df["age"] // 10).astype(str)))
    rules = association_rules(data, 0.1, 0.6)
    sensitive = rules[:3]
    for method in ("distortion", "blocking"):
        result = hide_rules(data, sensitive, 0.1, 0.6, method=method)
        after = _keys(result.rules_after)
        assert not (_keys(sensitive) & after)
        assert _keys(result.hidden) == _keys(sensitive)
        before = _keys(result.rules_before)
        assert after == (before - _keys(sensitive) - _keys(result.lost)) | _keys(result.ghost)


def test_bad_input():
    with pytest.raises(ConfigError, match="not among the mined rules"):
        hide_rules(BASKETS, [({"d"}, {"c"})], SUP, CONF)
    with pytest.raises(ConfigError, match="disjoint"):
        hide_rules(BASKETS, [({"a"}, {"a"})], SUP, CONF)
    with pytest.raises(ConfigError, match="min_support"):
        association_rules(BASKETS, 0, CONF)
    with pytest.raises(ConfigError, match="margin"):
        hide_rules(BASKETS, [({"a"}, {"b"})], SUP, CONF, margin=0.1)
