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
from firefeed.rules.groups import JOIN_MAX_CHARS, Aggregate, GroupFirst
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import (
    COUNT_OPS,
    ELEMENT,
    LIST_ACTIONS,
    Action,
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
    branch_excludes,
)
from firefeed.rules.template import as_text
from firefeed.textutil import strip_ws

#: a lookup's rows as its file has them, in order: name -> rows (field -> value)
LookupRows = Mapping[str, Sequence[Mapping[str, str]]]

#: a field's value: a text, or a list field's elements (SPEC 9), none of them ""
Value = str | tuple[str, ...]


@dataclass
class RulesOutcome:
    items: list[dict[str, Value]]  # excluded items removed, order kept
    matched: dict[str, int] = field(default_factory=dict)  # per enabled rule: items whose `when` matched
    excluded: int = 0
    lookups: list[dict[str, object]] = field(default_factory=list)  # per lookup action run, as rules.lookups


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
        value = item.get(cond.field, ())
        blank_text = isinstance(value, str) and _text.is_blank(value)
        return _count(0 if blank_text else len(items), cond)  # a blank text counts 0, like `empty` (P8)
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


def matches(
    cond: Condition, item: Mapping[str, Value], lists: ListFields = NO_LISTS, first: bool | None = None
) -> bool:
    """Whether `item` satisfies `cond` (a missing field reads as ""); `lists`: the list fields;
    `first`: whether the item is the first of its group, for group_first."""
    if isinstance(cond, Leaf):
        return _leaf(cond, item, lists)
    if isinstance(cond, GroupFirst):
        assert first is not None, "group_first needs the item's groups"
        return first == cond.value
    if isinstance(cond, AllOf):
        return all(matches(c, item, lists, first) for c in cond.items)
    if isinstance(cond, AnyOf):
        return any(matches(c, item, lists, first) for c in cond.items)
    assert isinstance(cond, Not)
    return not matches(cond.item, item, lists, first)


def group_of(item: Mapping[str, Value], group: str, position: int) -> tuple[str, int]:
    """An item's group: its group field's trimmed text; blank makes a group of one (P18)."""
    value = strip_ws(as_text(item.get(group, "")))
    return (value, -1) if value else ("", position)


def aggregate(action: Aggregate, members: Sequence[Mapping[str, Value]], lists: ListFields = NO_LISTS) -> Value:
    """The aggregate of `of` over a group's members, in export order (P16, P17).

    `of` naming a list field reads each member's elements: `join` joins them all, min/max/sum
    read the number of every element, first/last give that member's list as it is. A template
    `of` is one text per member (a list in it joined with ",").
    """
    if action.op == "count":
        return str(len(members))
    assert action.of is not None
    texts: list[str]
    if action.over_list(lists):
        assert action.of_field is not None
        each = [elements(m.get(action.of_field, ())) for m in members]
        if action.op in ("first", "last"):  # that member's value as it is (a list, or a text)
            return members[0 if action.op == "first" else -1].get(action.of_field, ())
        texts = [e for elems in each for e in elems]
    else:
        texts = [action.of.render(m) for m in members]
        if action.op in ("first", "last"):
            return texts[0] if action.op == "first" else texts[-1]
    if action.op == "join":
        return action.separator.join(v for v in texts if v != "")[:JOIN_MAX_CHARS]
    numbers = [n for n in map(_text.read_number, texts) if n is not None]
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


def _list_action(action: FieldAction, item: Mapping[str, Value], lists: ListFields) -> Value:
    """The new value of a list field (SPEC 9): a list (a tuple) or a text (a str), which only json/jsonl
    and `append`/`prepend` tell apart (P2, P12). `set`, `join`, a copied text, an aggregate's or a lookup's
    value are a text; a text stays a text through the actions that rewrite elements."""
    value = item.get(action.field, ())
    items = elements(value)
    if isinstance(action, Set):
        return action.value.render(item)
    if isinstance(action, Copy):
        return item.get(action.source, "")
    if isinstance(action, Append | Prepend):
        text = action.value.render(item)
        if text == "":  # adds nothing, and a text stays a text (P12)
            return value
        if action.field in lists.declared or (isinstance(value, tuple) and value):
            return items + from_text(text) if isinstance(action, Append) else from_text(text) + items
        return as_text(value) + text if isinstance(action, Append) else text + as_text(value)
    if isinstance(action, Split):
        return tuple(p.strip() for e in items for p in e.split(action.separator) if p.strip())
    if isinstance(action, Join):
        return action.separator.join(items)

    def on(element: str) -> str:
        result = apply_action(action, item, lists, subject=element)
        assert isinstance(result, str)
        return result

    if isinstance(value, str):  # a text: one element, "" none (P2), and a text it stays
        if isinstance(action, LIST_ACTIONS):
            return _text_list_action(action, value, item, lists)
        return on(value)
    if isinstance(action, Take):
        return items[: action.count]
    if isinstance(action, Dedupe):
        return tuple(dict.fromkeys(items))
    if isinstance(action, Remove):
        return tuple(e for e in items if not _removes(action, item, e, lists))
    if not items:
        return on("")  # P11: on no elements, as on the text ""
    return tuple(e for e in map(on, items) if e != "")


def _removes(action: Remove, item: Mapping[str, Value], element: str, lists: ListFields) -> bool:
    """Whether `remove` drops `element`: its condition reads `_` as the element, one text, whatever the
    project's list fields (P20)."""
    return matches(action.when, {**item, ELEMENT: element}, lists.without(ELEMENT))


def _text_list_action(action: FieldAction, value: str, item: Mapping[str, Value], lists: ListFields) -> str:
    """split/join/take/dedupe/remove on a text: a one-element list, "" none (P2)."""
    if isinstance(action, Take):
        return value if action.count > 0 else ""
    if isinstance(action, Remove):
        return "" if value and _removes(action, item, value, lists) else value
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


def lookup_row(
    part: LookupSet,
    item: Mapping[str, Value],
    tables: Mapping[str, Mapping[str, Mapping[str, str]]],
    lists: ListFields = NO_LISTS,
) -> Mapping[str, str] | None:
    """The row the item's `match` value finds (trimmed, exactly); a list tries its elements in order
    and the first one with a row matches (P22)."""
    rows = tables[part.lookup]
    value = item.get(part.match, "")
    if part.match in lists:
        return next((rows[k] for k in map(strip_ws, elements(value)) if k in rows), None)
    return rows.get(strip_ws(as_text(value)))


def _lookup(
    part: LookupSet,
    item: Mapping[str, Value],
    tables: Mapping[str, Mapping[str, Mapping[str, str]]],
    lists: ListFields = NO_LISTS,
) -> Value:
    """A lookup part: the matched row's column ("" when the row lacks it), else the default, else unchanged
    (a text written into a list field is one element, "" none)."""
    row = lookup_row(part, item, tables, lists)
    if row is not None:
        if part.column is None:
            return item.get(part.field, "")
        text = row.get(part.column, "")
    elif part.default is not None:
        text = part.default.render(item)
    else:
        return item.get(part.field, "")
    return text  # in a list field too: a text (P2)


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
    items: Iterable[Mapping[str, Value]],
    rules: Sequence[Rule],
    *,
    lookups: LookupRows | None = None,
    lookup_keys: Mapping[str, str] | None = None,
) -> RulesOutcome:
    """Run the enabled rules in order over `items`; excluded items are dropped and counted.

    `lookups` holds each lookup's rows as its file lists them and `lookup_keys` its key column.
    Rules run one at a time over every live item (what a rule sees is what the earlier ones left).
    A list field's value is a tuple of its elements (every rule carries the
    project's list fields); a list field an item lacks has no elements.
    """
    tables = {name: keyed_rows(rows, (lookup_keys or {})[name]) for name, rows in (lookups or {}).items()}
    active = [r for r in rules if r.enabled]
    outcome = RulesOutcome(items=[], matched={r.name: 0 for r in active})
    live = [dict(original) for original in items]
    for rule in active:
        lists = rule.lists
        for item in live:
            for name in lists.fields:
                item.setdefault(name, ())
        counts = [
            _LookupCount(rule.name, a)
            for branch in (rule.then, rule.else_)
            for a in branch
            if isinstance(a, LookupSet) and a.first
        ]
        by_tag = {c.part.tag: c for c in counts}
        firsts: list[bool | None] = [None] * len(live)
        totals: list[dict[str, Value]] = [{} for _ in live]
        if rule.uses_groups:
            # The groups and values as the rule starts (P16); every live member counts.
            group = next(g for g in _groups_of(rule))
            members: dict[tuple[str, int], list[int]] = {}
            for i, item in enumerate(live):
                members.setdefault(group_of(item, group, i), []).append(i)
            aggregates = [a for a in (*rule.then, *rule.else_) if isinstance(a, Aggregate)]
            for indexes in members.values():
                snapshot = [dict(live[i]) for i in indexes]
                values: dict[str, Value] = {a.tag: aggregate(a, snapshot, lists) for a in aggregates}
                for n, i in enumerate(indexes):
                    firsts[i] = n == 0
                    totals[i] = values
        kept: list[dict[str, Value]] = []
        for position, item in enumerate(live):
            hit = rule.when is None or matches(rule.when, item, lists, firsts[position])
            if hit:
                outcome.matched[rule.name] += 1
            branch = rule.then if hit else rule.else_
            if branch_excludes(branch):
                # The branch still runs, on a copy the rule then drops: its lookups are reported (P23).
                _run_branch(
                    tuple(a for a in branch if not isinstance(a, Exclude)),
                    dict(item),
                    totals[position],
                    tables,
                    by_tag,
                    lists,
                )
                outcome.excluded += 1
                continue
            _run_branch(branch, item, totals[position], tables, by_tag, lists)
            kept.append(item)
        live = kept
        outcome.lookups.extend(c.report() for c in counts)
    outcome.items = live
    return outcome


def _run_branch(
    branch: Sequence[Action],
    item: dict[str, Value],
    totals: Mapping[str, Value],
    tables: Mapping[str, Mapping[str, Mapping[str, str]]],
    by_tag: Mapping[str, _LookupCount],
    lists: ListFields,
) -> None:
    """A branch's actions on `item`, in order, each lookup counted in its report (`by_tag`, P23)."""
    for action in branch:
        assert not isinstance(action, Exclude)
        if isinstance(action, LookupSet):
            if action.first:
                count = by_tag[action.tag]
                if lookup_row(action, item, tables, lists) is not None:
                    count.matched += 1
                else:
                    # a list is listed as its text, the elements joined with "," (P23)
                    value = strip_ws(as_text(item.get(action.match, "")))
                    count.unmatched[value] = count.unmatched.get(value, 0) + 1
            item[action.field] = _lookup(action, item, tables, lists)
        elif isinstance(action, Aggregate):
            total = totals[action.tag]
            item[action.field] = total
        else:
            item[action.field] = apply_action(action, item, lists)
