"""The reference evaluator: the rule language in plain Python, one item at a time.

It is the oracle the SQL route is tested against, so it is written to be
obviously right rather than fast: each function is the sentence of the spec
it implements.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from firefeed.rules import _text
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.model import (
    COUNT_OPS,
    ELEMENT,
    LIST_ACTIONS,
    AllOf,
    AnyOf,
    Append,
    Capitalize,
    Condition,
    Copy,
    Dedupe,
    Exclude,
    FieldAction,
    Join,
    Leaf,
    Lowercase,
    MapValues,
    Math,
    Not,
    Prepend,
    RegexReplace,
    Remove,
    Replace,
    Rule,
    Set,
    Split,
    Take,
    Trim,
    Truncate,
    Uppercase,
)

#: a field's value: a text, or a list field's elements (SPEC 9), none of them ""
Value = str | tuple[str, ...]


@dataclass
class RulesOutcome:
    items: list[dict[str, Value]]  # excluded items removed, order kept
    matched: dict[str, int] = field(default_factory=dict)  # per enabled rule: items whose `when` matched
    excluded: int = 0


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def elements(value: Value) -> tuple[str, ...]:
    """A value's elements: a text is one element, "" none (P2)."""
    if isinstance(value, tuple):
        return value
    return (value,) if value else ()


def from_text(text: str) -> tuple[str, ...]:
    """A text written into a list field: one element, "" none (P1)."""
    return (text,) if text else ()


_NEGATED = {"ne": "eq", "not_contains": "contains", "not_in": "in"}


def _list_leaf(cond: Leaf, item: Mapping[str, Value], lists: ListFields) -> bool:
    """ANY element satisfies the op; `ne`, `not_contains`, `not_in`: NO element satisfies the positive op;
    no elements reads as the text "" (P7); `empty`: every element is blank."""
    items = elements(item.get(cond.field, ()))
    op = cond.op
    if op in COUNT_OPS:
        return _count(len(items), cond)
    if op in ("empty", "not_empty"):
        return all(_text.is_blank(e) for e in items) == (op == "empty")
    positive = _NEGATED.get(op)
    leaf = dataclasses.replace(cond, op=positive) if positive else cond
    found = any(_leaf(leaf, item, lists, subject=e) for e in (items or ("",)))
    return not found if positive else found


def _count(n: int, cond: Leaf) -> bool:
    assert cond.length is not None
    return {"count_gt": n > cond.length, "count_lt": n < cond.length, "count_eq": n == cond.length}[cond.op]


def _leaf(cond: Leaf, item: Mapping[str, Value], lists: ListFields = NO_LISTS, subject: str | None = None) -> bool:
    """`subject`: the text tested (an element of a list field); templates still read the item."""
    if subject is None and cond.field in lists:
        return _list_leaf(cond, item, lists)
    value = item.get(cond.field, "") if subject is None else subject
    assert isinstance(value, str), (cond.field, value)
    op = cond.op
    if op in COUNT_OPS:
        return _count(0 if _text.is_blank(value) else 1, cond)  # a blank text counts 0 (P8)
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


def matches(cond: Condition, item: Mapping[str, Value], lists: ListFields = NO_LISTS) -> bool:
    """Whether `item` satisfies `cond` (a missing field reads as ""); `lists`: the list fields."""
    if isinstance(cond, Leaf):
        return _leaf(cond, item, lists)
    if isinstance(cond, AllOf):
        return all(matches(c, item, lists) for c in cond.items)
    if isinstance(cond, AnyOf):
        return any(matches(c, item, lists) for c in cond.items)
    assert isinstance(cond, Not)
    return not matches(cond.item, item, lists)


def _regex_replace(action: RegexReplace, value: str) -> str:
    def repl(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in action.with_)

    return _compiled(action.pattern.py).sub(repl, value)


def _list_action(action: FieldAction, item: Mapping[str, Value], lists: ListFields) -> tuple[str, ...]:
    """The new elements of a list field (SPEC 9)."""
    items = elements(item.get(action.field, ()))
    if isinstance(action, Set):
        return from_text(action.value.render(item))
    if isinstance(action, Copy):
        source = item.get(action.source, "")
        return source if isinstance(source, tuple) else from_text(source)
    if isinstance(action, Append):
        return items + from_text(action.value.render(item))
    if isinstance(action, Prepend):
        return from_text(action.value.render(item)) + items
    if isinstance(action, Split):
        return tuple(p.strip() for e in items for p in e.split(action.separator) if p.strip())
    if isinstance(action, Join):
        return from_text(action.separator.join(items))
    if isinstance(action, Take):
        return items[: action.count]
    if isinstance(action, Dedupe):
        return tuple(dict.fromkeys(items))
    if isinstance(action, Remove):
        return tuple(e for e in items if not matches(action.when, {**item, ELEMENT: e}, lists))

    def on(element: str) -> str:
        result = apply_action(action, item, lists, subject=element)
        assert isinstance(result, str)
        return result

    if not items:
        return from_text(on(""))  # P11: on no elements, as on the text ""
    return tuple(e for e in map(on, items) if e != "")


def _text_list_action(action: FieldAction, value: str, item: Mapping[str, Value], lists: ListFields) -> str:
    """split/join/take/dedupe/remove on a text: a one-element list, "" none (P2)."""
    if isinstance(action, Take):
        return value if action.count > 0 else ""
    if isinstance(action, Remove):
        return "" if value and matches(action.when, {**item, ELEMENT: value}, lists) else value
    return value


def apply_action(
    action: FieldAction, item: Mapping[str, Value], lists: ListFields = NO_LISTS, *, subject: str | None = None
) -> Value:
    """The new value of `action.field`; `subject`: the one text rewritten (an element of a list field)
    instead of the field's value; templates still read the item's fields."""
    if subject is None and action.field in lists:
        return _list_action(action, item, lists)
    value = item.get(action.field, "") if subject is None else subject
    assert isinstance(value, str), (action.field, value)
    if isinstance(action, LIST_ACTIONS):
        return _text_list_action(action, value, item, lists)
    if isinstance(action, Set):
        return action.value.render(item)
    if isinstance(action, Copy):
        return item.get(action.source, "")  # a list field's copy is a list field (lists.derive_lists)
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


def apply_rules(items: Iterable[Mapping[str, Value]], rules: Sequence[Rule]) -> RulesOutcome:
    """Run the enabled rules in order over `items`; excluded items are dropped and counted.

    A list field's value is a tuple of its elements (every rule carries the
    project's list fields); a list field an item lacks has no elements.
    """
    active = [r for r in rules if r.enabled]
    outcome = RulesOutcome(items=[], matched={r.name: 0 for r in active})
    for original in items:
        item = dict(original)
        kept = True
        for rule in active:
            lists = rule.lists
            for name in lists.fields:
                item.setdefault(name, ())
            hit = rule.when is None or matches(rule.when, item, lists)
            if hit:
                outcome.matched[rule.name] += 1
            for action in rule.then if hit else rule.else_:
                if isinstance(action, Exclude):
                    kept = False
                    break
                item[action.field] = apply_action(action, item, lists)
            if not kept:
                break
        if kept:
            outcome.items.append(item)
        else:
            outcome.excluded += 1
    return outcome
