"""Conditions as SQL boolean expressions that are never NULL (field values never are).

Case-insensitive ops compare lower() of both sides: on the C.UTF-8 database
that is the simple one-to-one mapping, the same as _text.simple_lower, which
is also used to lowercase literal values here (checked over all of Unicode).
"""

from __future__ import annotations

from collections.abc import Callable

from firefeed.rules._frag import Frag, fmt, join, raw, val
from firefeed.rules._text import NUMBER_PATTERN, simple_lower
from firefeed.rules.model import AllOf, AnyOf, Condition, Leaf, Not
from firefeed.rules.template import FieldRef, Template
from firefeed.textutil import WHITESPACE

Column = Callable[[str], Frag]

_CMP = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<=", "length_gt": ">", "length_lt": "<"}


def template_frag(template: Template, column: Column) -> Frag:
    """The rendered template: literal parts bound, `{field}` parts the field's current value."""
    pieces = [val(p, "text") if not isinstance(p, FieldRef) else column(p.name) for p in template.parts]
    if not pieces:
        return raw("''::text")
    if len(pieces) == 1:
        return pieces[0]
    return fmt("({0})", join(pieces, " || "))


def number_frag(value: Frag) -> Frag:
    """The value's first number as numeric, NULL when it has none."""
    return fmt("replace(substring({0} FROM {1}), ',', '.')::numeric", value, val(NUMBER_PATTERN, "text"))


def _text_leaf(cond: Leaf, subject: Frag, column: Column) -> Frag:
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
        text = tpl.render({})
        wanted = val(text if cs else simple_lower(text), "text")
    else:
        wanted = template_frag(tpl, column) if cs else fmt("lower({0})", template_frag(tpl, column))
    left = subject if cs else fmt("lower({0})", subject)
    if op in ("eq", "ne"):
        return fmt("({0} = {1})" if op == "eq" else "({0} <> {1})", left, wanted)
    if op in ("contains", "not_contains"):
        return fmt("(strpos({0}, {1}) > 0)" if op == "contains" else "(strpos({0}, {1}) = 0)", left, wanted)
    if op == "starts_with":
        return fmt("starts_with({0}, {1})", left, wanted)
    # ends_with: the value's last char_length(wanted) characters are `wanted`
    return fmt("(right({0}, char_length({1})) = {1})", left, wanted)


def leaf_frag(cond: Leaf, column: Column) -> Frag:
    subject = column(cond.field)
    op = cond.op
    if op in ("empty", "not_empty"):
        return fmt(
            "(btrim({0}, {1}) = '')" if op == "empty" else "(btrim({0}, {1}) <> '')", subject, val(WHITESPACE, "text")
        )
    if op in ("gt", "gte", "lt", "lte"):
        return fmt("coalesce({0} " + _CMP[op] + " {1}, false)", number_frag(subject), val(cond.number, "numeric"))
    if op in ("length_gt", "length_lt"):
        return fmt("(char_length({0}) " + _CMP[op] + " {1})", subject, val(cond.length, "integer"))
    if op == "matches":
        assert cond.regex is not None
        left = subject if cond.case_sensitive else fmt("lower({0})", subject)
        return fmt("({0} ~ {1})", left, val(cond.regex.pg, "text"))
    return _text_leaf(cond, subject, column)


def condition_frag(cond: Condition, column: Column) -> Frag:
    """A boolean SQL expression for `cond`; `column(field)` gives a field's current value."""
    if isinstance(cond, Leaf):
        return leaf_frag(cond, column)
    if isinstance(cond, Not):
        return fmt("(NOT {0})", condition_frag(cond.item, column))
    if not cond.items:
        return raw("true" if isinstance(cond, AllOf) else "false")
    sep = " AND " if isinstance(cond, AllOf) else " OR "
    assert isinstance(cond, AllOf | AnyOf)
    return fmt("({0})", join((condition_frag(c, column) for c in cond.items), sep))
