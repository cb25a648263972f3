import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import linprog

from veil.anon import Hierarchy, KAnonymity, LDiversity, TCloseness, check
from veil.anon.emd import HierarchyTree, equal_distance, hierarchical_distance, ordered_distance
from veil.anon.encoding import SensitiveDomain
from veil.errors import ConfigError, DataError
from veil.random import default_rng

# Two classes: A has sensitive counts (3, 1, 1), B has (2, 2).
HAND = pd.DataFrame({
    "zip": ["476**"] * 5 + ["479**"] * 4,
    "disease": ["flu", "flu", "flu", "ulcer", "cancer", "flu", "flu", "ulcer", "ulcer"],
})


def test_k_anonymity_of_a_hand_built_table():
    report = check(HAND, ["zip"])
    assert (report.records, report.classes, report.k) == (9, 2, 4)
    assert KAnonymity(5).satisfied(np.array([5, 4]), None, None).tolist() == [True, False]


def test_l_diversity_variants_by_hand():
    report = check(HAND, ["zip"], "disease", l=2)
    assert report.l_distinct == 2
    # entropy: A has exp(H(.6,.2,.2)) = 2.586..., B exp(ln 2) = 2: the table is entropy 2-diverse
    h_a = -(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2))
    assert report.l_entropy == pytest.approx(min(math.exp(h_a), 2.0), rel=1e-12)
    # recursive, r sorted DEcreasingly: A 3 / (1 + 1) = 1.5, B 2 / 2 = 1 -> c = 1.5
    # (pycanon sorts increasingly and would compare 1 / (1 + 3) for A instead)
    assert report.c == pytest.approx(1.5)
    assert check(HAND, ["zip"], "disease", l=3).c == math.inf   # B has only 2 values


def test_recursive_model_is_strict_inequality():
    hist = np.array([[3, 1, 1], [2, 2, 0]])
    assert LDiversity(2, "recursive", c=1.5).satisfied(None, hist, None).tolist() == [False, True]
    assert LDiversity(2, "recursive", c=1.6).satisfied(None, hist, None).tolist() == [True, True]
    assert LDiversity(3, "distinct").satisfied(None, hist, None).tolist() == [True, False]
    # a uniform class over 2 values has entropy exactly log 2: entropy 2-diverse
    assert LDiversity(2, "entropy").satisfied(None, hist, None).tolist() == [True, True]
    assert LDiversity(3, "entropy").satisfied(None, hist, None).tolist() == [False, False]


SALARY = [3, 4, 5, 6, 7, 8, 9, 10, 11]


def _salary_table(classes):
    rows = [(f"g{i}", s * 1000) for i, members in enumerate(classes) for s in members]
    return pd.DataFrame(rows, columns=["group", "salary"])


def test_li_et_al_ordered_emd_salary_example():
    """Li, Li & Venkatasubramanian 2007: P1 = {3k,4k,5k} is 0.375 from the table's
    uniform distribution over 3k..11k, P2 = {6k,8k,11k} only 0.167."""
    q = np.full(9, 1 / 9)
    p1 = np.isin(SALARY, [3, 4, 5]) / 3
    p2 = np.isin(SALARY, [6, 8, 11]) / 3
    assert ordered_distance(np.stack([p1, p2]), q) == pytest.approx([0.375, 1 / 6])
    # their 0.167-close table: {3k,5k,9k}, {4k,7k,10k}, {6k,8k,11k}
    report = check(_salary_table([[3, 5, 9], [4, 7, 10], [6, 8, 11]]), ["group"], "salary")
    assert report.t_distance == "ordered"
    assert round(report.t, 3) == 0.167
    # a 3-diverse table that is not close: the low salaries together
    loose = check(_salary_table([[3, 4, 5], [6, 8, 11], [7, 9, 10]]), ["group"], "salary")
    assert loose.t == pytest.approx(0.375) and loose.l_distinct == 3
    domain = SensitiveDomain("salary", pd.Series([s * 1000 for s in SALARY]))
    hist = np.array([np.isin(SALARY, c).astype(int) for c in ([3, 5, 9], [3, 4, 5])])
    assert TCloseness(0.2).satisfied(None, hist, domain).tolist() == [True, False]
    # equal distance: P1 puts 1/3 on 3 values: 1/2 (3 (1/3 - 1/9) + 6/9) = 2/3
    assert equal_distance(p1[None], q)[0] == pytest.approx(2 / 3)


TREE = Hierarchy([["a", "x", "L", "*"], ["b", "x", "L", "*"], ["c", "y", "L", "*"],
                  ["d", "z", "R", "*"], ["e", "z", "R", "*"], ["f", "w", "R", "*"]])


def test_hierarchical_emd_by_hand():
    # all mass on leaf a against uniform: 1/6 to b at 1/3, 1/6 to c at 2/3, 3/6 to d,e,f at 1
    tree = HierarchyTree(TREE, np.array(list("abcdef"), dtype=object))
    p = np.array([[1.0, 0, 0, 0, 0, 0]])
    assert hierarchical_distance(p, np.full(6, 1 / 6), tree)[0] == pytest.approx(2 / 3)


def _lp_emd(p, q, ground):
    """The earth mover's distance as the transport linear program (scipy's HiGHS)."""
    m = len(p)
    rows = [np.kron(np.eye(m)[i], np.ones(m)) for i in range(m)]
    cols = [np.kron(np.ones(m), np.eye(m)[j]) for j in range(m)]
    res = linprog(ground.ravel(), A_eq=np.array(rows + cols), b_eq=np.r_[p, q],
                  bounds=(0, None), method="highs")
    return res.fun


def test_closed_forms_equal_the_transport_program():
    labels = TREE.to_frame().to_numpy()
    lca = np.array([[min(lv for lv in range(4) if labels[i, lv] == labels[j, lv]) / 3
                     for j in range(6)] for i in range(6)])
    ordered = np.abs(np.subtract.outer(np.arange(6), np.arange(6))) / 5
    tree = HierarchyTree(TREE, np.array(list("abcdef"), dtype=object))
    rng = default_rng(3)
    for _ in range(5):
        p, q = (w / w.sum() for w in rng.exponential(size=(2, 6)))
        # the LP solver is exact to ~1e-9: tolerances sit above it
        assert hierarchical_distance(p[None], q, tree)[0] == pytest.approx(
            _lp_emd(p, q, lca), abs=1e-8)
        assert ordered_distance(p[None], q)[0] == pytest.approx(_lp_emd(p, q, ordered), abs=1e-8)
        assert equal_distance(p[None], q)[0] == pytest.approx(_lp_emd(p, q, 1 - np.eye(6)),
                                                              abs=1e-8)


def test_check_hierarchical_distance():
    table = pd.DataFrame({"g": ["1"] * 3 + ["2"] * 3, "s": list("abcdef")})
    report = check(table, ["g"], "s", distance="hierarchical", sensitive_hierarchy=TREE)
    # class 1 holds a, b, c (all of L) against uniform: 1/2 of the mass crosses the root
    assert report.t == pytest.approx(0.5) and report.t_distance == "hierarchical"
    assert check(table, ["g"], "s").t == pytest.approx(0.5)     # equal distance: 1/2 too


def test_model_parameters_are_validated():
    with pytest.raises(ConfigError, match="k=0"):
        KAnonymity(0)
    with pytest.raises(ConfigError, match="c=None"):
        LDiversity(2, "recursive")
    with pytest.raises(ConfigError, match="c=2"):
        LDiversity(2, "distinct", c=2)
    with pytest.raises(ConfigError, match="variant"):
        LDiversity(2, "bogus")
    with pytest.raises(ConfigError, match="t=1.5"):
        TCloseness(1.5)
    with pytest.raises(ConfigError, match="hierarchy"):
        TCloseness(0.2, distance="hierarchical")


def test_ordered_emd_needs_numbers():
    with pytest.raises(DataError, match="ordered EMD needs a numeric"):
        check(HAND, ["zip"], "disease", distance="ordered")


def test_check_rejects_bad_input():
    with pytest.raises(DataError, match="empty"):
        check(HAND.iloc[:0], ["zip"])
    with pytest.raises(DataError, match="'nope'"):
        check(HAND, ["nope"])
    with pytest.raises(ConfigError, match="also a quasi-identifier"):
        check(HAND, ["zip", "disease"], "disease")
    with pytest.raises(DataError, match="missing"):
        check(HAND.assign(disease=[None] + list(HAND.disease[1:])), ["zip"], "disease")
