"""Association rules and their hiding (privacy-preserving data mining).

Mining: Apriori (Agrawal & Srikant, VLDB 1994). An itemset Z is frequent when its support
``supp(Z) = |{t : Z <= t}| / n`` is at least ``min_support``; the (k+1)-candidates join two
frequent k-itemsets sharing their first k-1 items and are pruned unless every k-subset is
frequent. A rule ``X => Y`` (X, Y disjoint, Z = X u Y frequent) holds when its confidence
``supp(Z) / supp(X)`` is at least ``min_confidence``. Supports are counted on bitsets: one
Python integer per item with bit i set when transaction i holds it.

Hiding a sensitive rule ``X => Y`` lowers its support or confidence below the thresholds
by acting on the transactions that support Z, shortest first (fewest side effects):

* distortion (Verykios, Elmagarmid, Bertino, Saygin & Dasseni, TKDE 2004): delete an item
  of Y (the most frequent one) from them; supp(Z) drops by one per transaction while
  supp(X) stays, so both support and confidence fall;
* blocking (Saygin, Verykios & Clifton, SIGMOD Record 2001): replace that item by an
  unknown ``?`` instead of deleting it. A miner that reads ``?`` as absent sees the minimum
  support; the rule is hidden when ``minsupp(Z) < min_support - margin`` or
  ``minsupp(Z) / minsupp(X) < min_confidence - margin`` (``margin``: the safety margin).
  Using minsupp(X) rather than Saygin et al.'s maxsupp(X) makes the condition hold for a
  miner that reads ``?`` as absent even when items of X were blocked for another rule.

Side effects are reported against the rules mined before and after: *hidden* sensitive
rules, *lost* non-sensitive rules, *ghost* rules that were not there before.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

import pandas as pd

from veil._validation import check_choice, check_probability
from veil.errors import ConfigError, DataError

__all__ = ["Rule", "HidingResult", "transactions_from_frame", "frequent_itemsets",
           "association_rules", "hide_rules"]

@dataclass(frozen=True)
class Rule:
    """``antecedent => consequent`` with its support and confidence."""

    antecedent: frozenset
    consequent: frozenset
    support: float = math.nan
    confidence: float = math.nan

    @property
    def key(self) -> tuple[frozenset, frozenset]:
        return self.antecedent, self.consequent

    def __str__(self) -> str:
        def fmt(s: frozenset) -> str:
            return "{" + ", ".join(sorted(map(str, s))) + "}"
        return f"{fmt(self.antecedent)} => {fmt(self.consequent)}"


def transactions_from_frame(df: pd.DataFrame, columns: Sequence[str] | None = None
                            ) -> list[frozenset[str]]:
    """One transaction per row with the items ``"column=value"``."""
    cols = list(df.columns if columns is None else columns)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"column {missing[0]!r} is not in the table")
    values = df[cols].astype(str).to_numpy()
    return [frozenset(f"{c}={v}" for c, v in zip(cols, row)) for row in values]


def _transactions(transactions: Iterable[Iterable[Hashable]]) -> list[frozenset]:
    out = [frozenset(t) for t in transactions]
    if not out:
        raise DataError("no transactions: expected at least one")
    return out


def _bitsets(transactions: Sequence[frozenset]) -> dict[Hashable, int]:
    masks: dict[Hashable, int] = {}
    for i, t in enumerate(transactions):
        bit = 1 << i
        for item in t:
            masks[item] = masks.get(item, 0) | bit
    return masks


def _count(threshold: float, n: int) -> int:
    """The smallest count whose share of n reaches ``threshold``."""
    return max(1, math.ceil(threshold * n - 1e-9))


def frequent_itemsets(transactions: Iterable[Iterable[Hashable]],
                      min_support: float) -> dict[frozenset, int]:
    """Every frequent itemset with its support count (Apriori on bitsets)."""
    check_probability(min_support, "min_support", low_open=True)
    data = _transactions(transactions)
    return _apriori(_bitsets(data), _count(min_support, len(data)))


def _apriori(masks: dict[Hashable, int], need: int) -> dict[frozenset, int]:
    order = sorted(masks, key=lambda item: (str(type(item)), str(item)))
    rank = {item: i for i, item in enumerate(order)}
    level = {(item,): masks[item] for item in order if masks[item].bit_count() >= need}
    found: dict[frozenset, int] = {}
    while level:
        found.update({frozenset(s): m.bit_count() for s, m in level.items()})
        keys = sorted(level, key=lambda s: [rank[i] for i in s])
        nxt: dict[tuple, int] = {}
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                if a[:-1] != b[:-1]:
                    break
                cand = a + (b[-1],)
                if any(cand[:j] + cand[j + 1:] not in level for j in range(len(cand) - 2)):
                    continue
                mask = level[a] & masks[b[-1]]
                if mask.bit_count() >= need:
                    nxt[cand] = mask
        level = nxt
    return found


def _rules(itemsets: dict[frozenset, int], n: int, min_confidence: float) -> list[Rule]:
    rules = []
    for z, count in itemsets.items():
        items = sorted(z, key=str)
        for size in range(1, len(items)):
            for x in _subsets(items, size):
                conf = count / itemsets[x]
                if conf >= min_confidence - 1e-12:
                    rules.append(Rule(x, z - x, count / n, conf))
    return sorted(rules, key=lambda r: (-r.support, -r.confidence, str(r)))


def _subsets(items: list, size: int) -> Iterable[frozenset]:
    return (frozenset(c) for c in combinations(items, size))


def association_rules(transactions: Iterable[Iterable[Hashable]], min_support: float,
                      min_confidence: float) -> list[Rule]:
    """All rules with support >= ``min_support`` and confidence >= ``min_confidence``."""
    check_probability(min_support, "min_support", low_open=True)
    check_probability(min_confidence, "min_confidence", low_open=True)
    data = _transactions(transactions)
    return _rules(_apriori(_bitsets(data), _count(min_support, len(data))), len(data),
                  min_confidence)


@dataclass(frozen=True)
class HidingResult:
    """Sanitized transactions and the side effects on the mined rules.

    ``transactions``: the items each transaction certainly holds; ``unknown``: the items
    replaced by ``?`` (blocking; empty sets for distortion). ``changed``: items deleted or
    blocked.
    """

    transactions: list[frozenset]
    unknown: list[frozenset]
    rules_before: list[Rule]
    rules_after: list[Rule]
    hidden: list[Rule]
    lost: list[Rule]
    ghost: list[Rule]
    changed: int


def _as_rule(rule: Rule | tuple) -> Rule:
    if isinstance(rule, Rule):
        return rule
    try:
        x, y = rule
        return Rule(frozenset(x), frozenset(y))
    except (TypeError, ValueError):
        raise ConfigError(f"sensitive rule {rule!r} is not allowed: pass a Rule or a pair "
                          "(antecedent items, consequent items)") from None


def hide_rules(transactions: Iterable[Iterable[Hashable]], sensitive: Iterable[Rule | tuple],
               min_support: float, min_confidence: float, *, method: str = "distortion",
               margin: float = 0.0) -> HidingResult:
    """Sanitize ``transactions`` so that no ``sensitive`` rule is mined any more."""
    check_probability(min_support, "min_support", low_open=True)
    check_probability(min_confidence, "min_confidence", low_open=True)
    check_choice(method, "method", ("distortion", "blocking"))
    if not 0 <= margin < min(min_support, min_confidence):
        raise ConfigError(f"margin={margin!r} is not allowed: must be in [0, "
                          f"{min(min_support, min_confidence)})")
    if margin and method == "distortion":
        raise ConfigError("margin applies to method='blocking' only")
    data = _transactions(transactions)
    n = len(data)
    before = association_rules(data, min_support, min_confidence)
    mined = {r.key for r in before}
    targets = [_as_rule(r) for r in sensitive]
    for rule in targets:
        if not rule.antecedent or not rule.consequent or rule.antecedent & rule.consequent:
            raise ConfigError(f"sensitive rule {rule} is not allowed: need non-empty, "
                              "disjoint antecedent and consequent")
        if rule.key not in mined:
            raise ConfigError(f"sensitive rule {rule} is not among the mined rules "
                              f"(min_support={min_support}, min_confidence={min_confidence})")
    certain = [set(t) for t in data]
    unknown: list[set] = [set() for _ in data]
    need_support = (min_support - margin) * n
    need_conf = min_confidence - margin
    changed = 0

    def exposed(rule: Rule) -> tuple[list[int], int] | None:
        """Supporting transactions and supp(X) if a miner still finds the rule, else None."""
        z = rule.antecedent | rule.consequent
        support = [i for i in range(n) if z <= certain[i]]
        x = sum(1 for t in certain if rule.antecedent <= t)
        if len(support) < need_support - 1e-9 or len(support) < need_conf * x - 1e-9:
            return None
        return support, x

    progress = True
    while progress:
        progress = False
        for rule in targets:
            found = exposed(rule)
            if found is None:
                continue
            support, x = found
            # the fewest changes d with (s - d) < need_support or (s - d) < need_conf * x
            s = len(support)
            d = 1 + min(math.floor(s - need_support + 1e-9),
                        math.floor(s - need_conf * x + 1e-9))
            counts = {y: sum(1 for t in certain if y in t) for y in rule.consequent}
            victim = max(sorted(rule.consequent, key=str), key=counts.__getitem__)
            for i in sorted(support, key=lambda i: (len(certain[i]), i))[:max(d, 1)]:
                certain[i].discard(victim)
                if method == "blocking":
                    unknown[i].add(victim)
                changed += 1
                progress = True
    released = [frozenset(t) for t in certain]
    after = association_rules(released, min_support, min_confidence)
    after_keys = {r.key for r in after}
    sensitive_keys = {r.key for r in targets}
    return HidingResult(
        transactions=released, unknown=[frozenset(u) for u in unknown],
        rules_before=before, rules_after=after,
        hidden=[r for r in before if r.key in sensitive_keys and r.key not in after_keys],
        lost=[r for r in before if r.key not in sensitive_keys and r.key not in after_keys],
        ghost=[r for r in after if r.key not in mined],
        changed=changed)
