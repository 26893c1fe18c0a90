"""Conditions as SQL boolean expressions that are never NULL (field values never are).

Case-insensitive ops compare lower() of both sides: on the C.UTF-8 database
that is the simple one-to-one mapping, the same as _text.simple_lower, which
is also used to lowercase literal values here (checked over all of Unicode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from firefeed.rules import _lists_sql as _lists
from firefeed.rules._frag import Frag, fmt, join, of, raw, val
from firefeed.rules._text import NUMBER_MAX_CHARS, NUMBER_PATTERN, simple_lower
from firefeed.rules.groups import GROUP_FIRST_COLUMN, GroupFirst
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.model import COUNT_OPS, AllOf, AnyOf, Condition, Leaf, Not
from firefeed.rules.template import FieldRef, Template
from firefeed.schema.identifiers import ORD, ident
from firefeed.textutil import WHITESPACE

Column = Callable[[str], Frag]
#: a field's first number as matched text (a column computed once for several uses), or None: compute it inline
NumberText = Callable[[str], Frag | None]

#: characters with a meaning in a Postgres pattern; a translated pattern without any is a literal string
_REGEX_SPECIAL = frozenset("\\.[](){}*+?|^$")

_CMP = {
    "gt": ">",
    "gte": ">=",
    "lt": "<",
    "lte": "<=",
    "length_gt": ">",
    "length_lt": "<",
    "count_gt": ">",
    "count_lt": "<",
    "count_eq": "=",
}


def ref_frag(ref: FieldRef, column: Column, lists: ListFields = NO_LISTS) -> Frag:
    """A template reference as text: `{f}` (a list joined with ","), `{f[i]}` an element (P9)."""
    value = column(ref.name)
    if ref.name in lists:
        return _lists.as_text(value) if ref.index is None else _lists.element(value, ref.index)
    return value if ref.index is None else _lists.text_element(value, ref.index)


def template_frag(
    template: Template, column: Column, lists: ListFields = NO_LISTS, once: _lists.Once | None = None
) -> Frag:
    """The rendered template: literal parts bound, `{field}` parts the field's current value (`once`:
    inside a per-element expression, each read through it, `item_template_frag`)."""

    def piece(p: str | FieldRef) -> Frag:
        if not isinstance(p, FieldRef):
            return val(p, "text")
        value = ref_frag(p, column, lists)
        return value if once is None else once.item_ref(p, value)

    pieces = [piece(p) for p in template.parts]
    if not pieces:
        return raw("''::text")
    if len(pieces) == 1:
        return pieces[0]
    return fmt("({0})", join(pieces, " || "))


def item_template_frag(
    template: Template, column: Column, lists: ListFields, once: _lists.Once | None, *, lower: bool = False
) -> Frag:
    """`template_frag` (lowered with `lower`) inside a per-element expression: computed once per item
    through `once`, not once per element. One that reads the element itself (`{_}` in a `remove`
    condition) is computed per element, but each of its references to the item once per item."""

    def lowered(frag: Frag) -> Frag:
        return fmt("lower({0})", frag) if lower else frag

    if once is None or template.is_literal:
        return lowered(template_frag(template, column, lists))
    if once.reads_element(template):
        return lowered(template_frag(template, column, lists, once))
    return once(lowered(template_frag(template, column, lists)))


def number_text_frag(value: Frag) -> Frag:
    """The text of the value's first number, NULL when it has none (the one regex of number reading)."""
    return fmt("substring({0} FROM {1})", value, val(NUMBER_PATTERN, "text"))


def numeric_frag(text: Frag) -> Frag:
    """A number's matched text as numeric (a comma is the decimal point), read from its first
    NUMBER_MAX_CHARS characters (a longer one would fail the statement); NULL stays NULL."""
    return fmt("replace(left({0}, {1}), ',', '.')::numeric", text, raw(str(NUMBER_MAX_CHARS)))


def number_frag(value: Frag) -> Frag:
    """The value's first number as numeric, NULL when it has none."""
    return numeric_frag(number_text_frag(value))


def blank_frag(value: Frag, empty: bool) -> Frag:
    """`empty` / `not_empty` of a value (a column: it is repeated).

    btrim() with the multibyte white-space set measures the whole value first,
    which is slow on long text; most values are '' or start with a character
    that is not white space, and those are decided without it.
    """
    ws = val(WHITESPACE, "text")
    if empty:
        return fmt("({0} = '' OR (strpos({1}, left({0}, 1)) > 0 AND btrim({0}, {1}) = ''))", value, ws)
    return fmt("({0} <> '' AND (strpos({1}, left({0}, 1)) = 0 OR btrim({0}, {1}) <> ''))", value, ws)


def _text_leaf(
    cond: Leaf, subject: Frag, column: Column, lists: ListFields = NO_LISTS, once: _lists.Once | None = None
) -> Frag:
    op = cond.op
    cs = cond.case_sensitive
    if op in ("in", "not_in"):
        values = list(dict.fromkeys(v if cs else simple_lower(v) for v in cond.values))
        left = subject if cs else fmt("lower({0})", subject)
        expr = fmt("({0} = ANY({1}))", left, val(values, "text[]"))
        return expr if op == "in" else fmt("(NOT {0})", expr)
    assert cond.template is not None
    tpl = cond.template
    if tpl.is_literal:
        text = tpl.render({}) if cs else simple_lower(tpl.render({}))
        wanted = val(text, "text")
        # lower() maps each character to one character, so only the compared end of the value is lowered
        if op == "starts_with":
            head = fmt("left({0}, {1})", subject, val(len(text), "integer"))
            return fmt("({0} = {1})", head if cs else fmt("lower({0})", head), wanted)
        if op == "ends_with":
            tail = fmt("right({0}, {1})", subject, val(len(text), "integer"))
            return fmt("({0} = {1})", tail if cs else fmt("lower({0})", tail), wanted)
    else:
        wanted = item_template_frag(tpl, column, lists, once, lower=not cs)
    left = subject if cs else fmt("lower({0})", subject)
    if op in ("eq", "ne"):
        return fmt("({0} = {1})" if op == "eq" else "({0} <> {1})", left, wanted)
    if op in ("contains", "not_contains"):
        return fmt("(strpos({0}, {1}) > 0)" if op == "contains" else "(strpos({0}, {1}) = 0)", left, wanted)
    if op == "starts_with":
        return fmt("starts_with({0}, {1})", left, wanted)
    # ends_with: the value's last char_length(wanted) characters are `wanted`
    return fmt("(right({0}, char_length({1})) = {1})", left, wanted)


#: the positive op each negated text op is the NOT of (on a list: no element satisfies it, SPEC 9)
_NEGATED = {"ne": "eq", "not_contains": "contains", "not_in": "in"}


def _list_leaf(cond: Leaf, column: Column, lists: ListFields) -> Frag:
    """A leaf on a list field: ANY element (negated ops: NO element); no elements reads as "" (P7)."""
    value = column(cond.field)
    op = cond.op
    if op in COUNT_OPS:
        return fmt("(" + "{0} " + _CMP[op] + " {1})", _lists.count(value), val(cond.length, "integer"))
    if op in ("empty", "not_empty"):
        every_blank = _lists.every_element(value, blank_frag(_lists.ELEMENT, True))
        return every_blank if op == "empty" else fmt("(NOT {0})", every_blank)
    positive = _NEGATED.get(op)
    leaf = dataclasses.replace(cond, op=positive) if positive else cond

    once = _lists.Once()
    test = leaf_frag(leaf, column, None, lists, subject=_lists.ELEMENT, once=once)
    found = _lists.any_element(value, test, leaf_frag(leaf, column, None, lists, subject=raw("''::text")), once)
    return fmt("(NOT {0})", found) if positive else found


def leaf_frag(
    cond: Leaf,
    column: Column,
    number_text: NumberText | None = None,
    lists: ListFields = NO_LISTS,
    *,
    subject: Frag | None = None,
    once: _lists.Once | None = None,
) -> Frag:
    """`subject`: the text the leaf tests (an element of the list field) instead of the field's value;
    templates in the value still read the item's fields, through `once` when given (`_lists_sql.Once`)."""
    if subject is None:
        if cond.field in lists:
            return _list_leaf(cond, column, lists)
        subject = column(cond.field)
    op = cond.op
    if op in COUNT_OPS:
        # a text is one element, a blank one none (P8)
        counted = fmt("(CASE WHEN {0} THEN 0 ELSE 1 END)", blank_frag(subject, True))
        return fmt("(" + "{0} " + _CMP[op] + " {1})", counted, val(cond.length, "integer"))
    if op in ("empty", "not_empty"):
        return blank_frag(subject, op == "empty")
    if op in ("gt", "gte", "lt", "lte"):
        known = number_text(cond.field) if number_text is not None else None
        number = numeric_frag(known) if known is not None else number_frag(subject)
        return fmt("coalesce({0} " + _CMP[op] + " {1}, false)", number, val(cond.number, "numeric"))
    if op in ("length_gt", "length_lt"):
        return _length_frag(subject, op, val(cond.length, "integer"))
    if op == "matches":
        assert cond.regex is not None
        left = subject if cond.case_sensitive else fmt("lower({0})", subject)
        if cond.regex.ignore_case:  # Postgres' own case-insensitive reading (_regex.py says which)
            return fmt("({0} ~* {1})", left, val(cond.regex.pg, "text"))
        if not _REGEX_SPECIAL.intersection(cond.regex.pg):
            # a literal pattern (punctuation is always escaped): a plain substring test, no regex engine
            return fmt("(strpos({0}, {1}) > 0)", left, val(cond.regex.pg, "text"))
        return fmt("({0} ~ {1})", left, val(cond.regex.pg, "text"))
    return _text_leaf(cond, subject, column, lists, once)


def _length_frag(subject: Frag, op: str, length: Frag) -> Frag:
    """`char_length(subject)` compared with `length`, counting the characters only when the bytes don't decide.

    A text has at least as many bytes as characters, so a `length_gt` whose text has at most that
    many bytes is false, and a `length_lt` whose text has fewer is true. Counting UTF-8 characters
    reads every byte: on 1M product descriptions (316 bytes on average) `length_gt 4900` took 0.64 s,
    against next to nothing with `octet_length` (a header read) first.
    """
    if op == "length_gt":
        return fmt("(octet_length({0}) > {1} AND char_length({0}) > {1})", subject, length)
    return fmt("(octet_length({0}) < {1} OR char_length({0}) < {1})", subject, length)


#: the SQL of "the item is the first of its group" for a group_first leaf
FirstOfGroup = Callable[[GroupFirst], Frag]


def joined_first(cond: GroupFirst) -> Frag:
    """In a grouped rules pass, which joins its groups' first positions (sqlgen)."""
    return fmt("({0} = {1})", of(ident(ORD)), of(ident(GROUP_FIRST_COLUMN)))


def condition_frag(
    cond: Condition,
    column: Column,
    number_text: NumberText | None = None,
    lists: ListFields = NO_LISTS,
    first: FirstOfGroup = joined_first,
    *,
    once: _lists.Once | None = None,
) -> Frag:
    """A boolean SQL expression for `cond`; `column(field)` gives a field's current value,
    `number_text(field)` (optional) the text of its first number when that is already computed,
    `lists` the project's list fields (SPEC 9), `first` the test of a group_first leaf; `once`: the
    condition is a per-element test (`remove`'s), whose templates read the item through it."""
    if isinstance(cond, Leaf):
        return leaf_frag(cond, column, number_text, lists, once=once)
    if isinstance(cond, GroupFirst):
        test = first(cond)
        return test if cond.value else fmt("(NOT {0})", test)
    if isinstance(cond, Not):
        return fmt("(NOT {0})", condition_frag(cond.item, column, number_text, lists, first, once=once))
    if not cond.items:
        return raw("true" if isinstance(cond, AllOf) else "false")
    sep = " AND " if isinstance(cond, AllOf) else " OR "
    assert isinstance(cond, AllOf | AnyOf)
    items = (condition_frag(c, column, number_text, lists, first, once=once) for c in cond.items)
    return fmt("({0})", join(items, sep))
