"""The reference evaluator: the rule language in plain Python, one item at a time.

It is the oracle the SQL route is tested against, so it is written to be
obviously right rather than fast: each function is the sentence of the spec
it implements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from firefeed.rules import _text
from firefeed.rules.groups import Aggregate, GroupFirst
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import (
    AllOf,
    AnyOf,
    Append,
    Capitalize,
    Condition,
    Copy,
    Exclude,
    FieldAction,
    Leaf,
    Lowercase,
    MapValues,
    Math,
    Not,
    Prepend,
    RegexReplace,
    Replace,
    Rule,
    Set,
    Trim,
    Truncate,
    Uppercase,
    branch_excludes,
)
from firefeed.textutil import strip_ws

#: a lookup's rows as its file has them, in order: name -> rows (field -> value)
LookupRows = Mapping[str, Sequence[Mapping[str, str]]]


@dataclass
class RulesOutcome:
    items: list[dict[str, str]]  # excluded items removed, order kept
    matched: dict[str, int] = field(default_factory=dict)  # per enabled rule: items whose `when` matched
    excluded: int = 0
    lookups: list[dict[str, object]] = field(default_factory=list)  # per lookup action run, as rules.lookups


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _leaf(cond: Leaf, item: Mapping[str, str]) -> bool:
    value = item.get(cond.field, "")
    op = cond.op
    if op in ("empty", "not_empty"):
        return _text.is_blank(value) == (op == "empty")
    if op in ("gt", "gte", "lt", "lte"):
        number = _text.read_number(value)
        assert cond.number is not None
        if number is None:
            return False
        return {
            "gt": number > cond.number,
            "gte": number >= cond.number,
            "lt": number < cond.number,
            "lte": number <= cond.number,
        }[op]
    if op in ("length_gt", "length_lt"):
        assert cond.length is not None
        return len(value) > cond.length if op == "length_gt" else len(value) < cond.length
    if op == "matches":
        assert cond.regex is not None
        subject = value if cond.case_sensitive else _text.simple_lower(value)
        return _compiled(cond.regex.py).search(subject) is not None

    def fold(text: str) -> str:
        return text if cond.case_sensitive else _text.simple_lower(text)

    if op in ("in", "not_in"):
        return (fold(value) in {fold(v) for v in cond.values}) == (op == "in")
    assert cond.template is not None
    subject, wanted = fold(value), fold(cond.template.render(item))
    if op in ("eq", "ne"):
        return (subject == wanted) == (op == "eq")
    if op in ("contains", "not_contains"):
        return (wanted in subject) == (op == "contains")
    if op == "starts_with":
        return subject.startswith(wanted)
    return subject.endswith(wanted)


def matches(cond: Condition, item: Mapping[str, str], first: bool | None = None) -> bool:
    """Whether `item` satisfies `cond` (a missing field reads as ""); `first`: whether the item is the
    first of its group, for group_first."""
    if isinstance(cond, Leaf):
        return _leaf(cond, item)
    if isinstance(cond, GroupFirst):
        assert first is not None, "group_first needs the item's groups"
        return first == cond.value
    if isinstance(cond, AllOf):
        return all(matches(c, item, first) for c in cond.items)
    if isinstance(cond, AnyOf):
        return any(matches(c, item, first) for c in cond.items)
    assert isinstance(cond, Not)
    return not matches(cond.item, item, first)


def group_of(item: Mapping[str, str], group: str, position: int) -> tuple[str, int]:
    """An item's group: its group field's trimmed text; blank makes a group of one (P18)."""
    value = strip_ws(item.get(group, ""))
    return (value, -1) if value else ("", position)


def aggregate(action: Aggregate, members: Sequence[Mapping[str, str]]) -> str:
    """The aggregate of `of` over a group's members, in export order (P16, P17).

    TODO(issue 18, lists): P16's list cases (join/min/max/sum over elements, first/last keep a list).
    """
    if action.op == "count":
        return str(len(members))
    assert action.of is not None
    values = [action.of.render(m) for m in members]
    if action.op == "first":
        return values[0]
    if action.op == "last":
        return values[-1]
    if action.op == "join":
        return action.separator.join(v for v in values if v != "")
    numbers = [n for n in map(_text.read_number, values) if n is not None]
    if not numbers:
        return ""
    places = action.round
    if places is None:
        places = max(max(0, -int(n.as_tuple().exponent)) for n in numbers)
    total = {"min": min, "max": max, "sum": sum}[action.op](numbers)  # type: ignore[operator]
    return _text.format_number(total, places)


def _regex_replace(action: RegexReplace, value: str) -> str:
    def repl(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in action.with_)

    return _compiled(action.pattern.py).sub(repl, value)


def apply_action(action: FieldAction, item: Mapping[str, str]) -> str:
    """The new value of `action.field` (a lookup part needs its table: apply_rules)."""
    value = item.get(action.field, "")
    if isinstance(action, Set):
        return action.value.render(item)
    if isinstance(action, Copy):
        return item.get(action.source, "")
    if isinstance(action, Append):
        return value + action.value.render(item)
    if isinstance(action, Prepend):
        return action.value.render(item) + value
    if isinstance(action, Replace):
        return value.replace(action.find, action.with_)
    if isinstance(action, RegexReplace):
        return _regex_replace(action, value)
    if isinstance(action, Lowercase):
        return _text.simple_lower(value)
    if isinstance(action, Uppercase):
        return _text.simple_upper(value)
    if isinstance(action, Capitalize):
        return _text.capitalize(value)
    if isinstance(action, Trim):
        return _text.trim(value)
    if isinstance(action, Truncate):
        return _text.truncate(value, action.length)
    if isinstance(action, Math):
        return _text.math(value, action.op, action.value, action.round)
    assert isinstance(action, MapValues), action
    for key, target in action.values:
        if key == value:
            return target.render(item)
    return action.default.render(item) if action.default is not None else value


def keyed_rows(rows: Sequence[Mapping[str, str]], key: str) -> dict[str, Mapping[str, str]]:
    """A lookup's rows by key: the key trimmed, blank keys skipped, a repeated key's first row (P21)."""
    out: dict[str, Mapping[str, str]] = {}
    for row in rows:
        k = strip_ws(row.get(key, ""))
        if k and k not in out:
            out[k] = row
    return out


@dataclass
class _LookupCount:
    """One lookup action's report (P23): matched items, and each unmatched value's count in first-seen order."""

    rule: str
    part: LookupSet
    matched: int = 0
    unmatched: dict[str, int] = field(default_factory=dict)

    def report(self) -> dict[str, object]:
        order = {v: i for i, v in enumerate(self.unmatched)}
        top = sorted(self.unmatched.items(), key=lambda vn: (-vn[1], order[vn[0]]))[:20]
        return {
            "rule": self.rule,
            "action": self.part.path.rsplit(".", 1)[-1],
            "lookup": self.part.lookup,
            "matched": self.matched,
            "unmatched": sum(self.unmatched.values()),
            "unmatched_values": [{"value": v, "count": n} for v, n in top],
        }


def _lookup(part: LookupSet, item: Mapping[str, str], tables: Mapping[str, Mapping[str, Mapping[str, str]]]) -> str:
    """A lookup part: the matched row's column ("" when the row lacks it), else the default, else unchanged.

    TODO(issue 18, lists): P22, a list `match` tries its elements in order.
    """
    row = tables[part.lookup].get(strip_ws(item.get(part.match, "")))
    if row is not None:
        return row.get(part.column, "") if part.column is not None else item.get(part.field, "")
    return part.default.render(item) if part.default is not None else item.get(part.field, "")


def _groups_of(rule: Rule) -> Iterable[str]:
    """The group field a rule reads (every aggregate and group_first of a spec names the same)."""
    for a in (*rule.then, *rule.else_):
        if isinstance(a, Aggregate):
            yield a.group

    def walk(cond: Condition) -> Iterable[str]:
        if isinstance(cond, GroupFirst):
            yield cond.group
        elif isinstance(cond, Not):
            yield from walk(cond.item)
        elif isinstance(cond, AllOf | AnyOf):
            for c in cond.items:
                yield from walk(c)

    if rule.when is not None:
        yield from walk(rule.when)


def apply_rules(
    items: Iterable[Mapping[str, str]],
    rules: Sequence[Rule],
    *,
    lookups: LookupRows | None = None,
    lookup_keys: Mapping[str, str] | None = None,
) -> RulesOutcome:
    """Run the enabled rules in order over `items`; excluded items are dropped and counted.

    `lookups` holds each lookup's rows as its file lists them and `lookup_keys` its key column.
    Rules run one at a time over every live item (what a rule sees is what the earlier ones left).
    """
    tables = {name: keyed_rows(rows, (lookup_keys or {})[name]) for name, rows in (lookups or {}).items()}
    active = [r for r in rules if r.enabled]
    outcome = RulesOutcome(items=[], matched={r.name: 0 for r in active})
    live = [dict(original) for original in items]
    for rule in active:
        counts = [
            _LookupCount(rule.name, a)
            for branch in (rule.then, rule.else_)
            if not branch_excludes(branch)
            for a in branch
            if isinstance(a, LookupSet) and a.first
        ]
        by_tag = {c.part.tag: c for c in counts}
        firsts: list[bool | None] = [None] * len(live)
        totals: list[dict[str, str]] = [{} for _ in live]
        if rule.uses_groups:
            # The groups and values as the rule starts (P16); every live member counts.
            group = next(g for g in _groups_of(rule))
            members: dict[tuple[str, int], list[int]] = {}
            for i, item in enumerate(live):
                members.setdefault(group_of(item, group, i), []).append(i)
            aggregates = [a for a in (*rule.then, *rule.else_) if isinstance(a, Aggregate)]
            for indexes in members.values():
                snapshot = [dict(live[i]) for i in indexes]
                values = {a.tag: aggregate(a, snapshot) for a in aggregates}
                for n, i in enumerate(indexes):
                    firsts[i] = n == 0
                    totals[i] = values
        kept: list[dict[str, str]] = []
        for position, item in enumerate(live):
            hit = rule.when is None or matches(rule.when, item, firsts[position])
            if hit:
                outcome.matched[rule.name] += 1
            branch = rule.then if hit else rule.else_
            if branch_excludes(branch):
                outcome.excluded += 1
                continue
            for action in branch:
                assert not isinstance(action, Exclude)
                if isinstance(action, LookupSet):
                    if action.first:
                        count = by_tag[action.tag]
                        value = strip_ws(item.get(action.match, ""))
                        if value in tables[action.lookup]:
                            count.matched += 1
                        else:
                            count.unmatched[value] = count.unmatched.get(value, 0) + 1
                    item[action.field] = _lookup(action, item, tables)
                elif isinstance(action, Aggregate):
                    item[action.field] = totals[position][action.tag]
                else:
                    item[action.field] = apply_action(action, item)
            kept.append(item)
        live = kept
        outcome.lookups.extend(c.report() for c in counts)
    outcome.items = live
    return outcome
