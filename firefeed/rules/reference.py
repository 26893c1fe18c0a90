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
)


@dataclass
class RulesOutcome:
    items: list[dict[str, str]]  # excluded items removed, order kept
    matched: dict[str, int] = field(default_factory=dict)  # per enabled rule: items whose `when` matched
    excluded: int = 0


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


def matches(cond: Condition, item: Mapping[str, str]) -> bool:
    """Whether `item` satisfies `cond` (a missing field reads as "")."""
    if isinstance(cond, Leaf):
        return _leaf(cond, item)
    if isinstance(cond, AllOf):
        return all(matches(c, item) for c in cond.items)
    if isinstance(cond, AnyOf):
        return any(matches(c, item) for c in cond.items)
    assert isinstance(cond, Not)
    return not matches(cond.item, item)


def _regex_replace(action: RegexReplace, value: str) -> str:
    def repl(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in action.with_)

    return _compiled(action.pattern.py).sub(repl, value)


def apply_action(action: FieldAction, item: Mapping[str, str]) -> str:
    """The new value of `action.field`."""
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
    assert isinstance(action, MapValues)
    for key, target in action.values:
        if key == value:
            return target.render(item)
    return action.default.render(item) if action.default is not None else value


def apply_rules(items: Iterable[Mapping[str, str]], rules: Sequence[Rule]) -> RulesOutcome:
    """Run the enabled rules in order over `items`; excluded items are dropped and counted."""
    active = [r for r in rules if r.enabled]
    outcome = RulesOutcome(items=[], matched={r.name: 0 for r in active})
    for original in items:
        item = dict(original)
        kept = True
        for rule in active:
            hit = rule.when is None or matches(rule.when, item)
            if hit:
                outcome.matched[rule.name] += 1
            for action in rule.then if hit else rule.else_:
                if isinstance(action, Exclude):
                    kept = False
                    break
                item[action.field] = apply_action(action, item)
            if not kept:
                break
        if kept:
            outcome.items.append(item)
        else:
            outcome.excluded += 1
    return outcome
