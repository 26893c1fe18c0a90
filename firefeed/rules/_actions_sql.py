"""Actions as SQL text expressions: the new value of the action's field.

All inline expressions (no CREATE FUNCTION, no per-row subquery), so a pass
is one INSERT ... SELECT that runs on any database. The tricky ones:

- capitalize: Postgres' initcap() starts a word after any non-alphanumeric
  character ("x-men" -> "X-Men"), the spec after white space only. A marker
  '0' (alphanumeric, caseless) is put after every character that is neither
  alphanumeric nor white space, so initcap sees a word start exactly after
  white space; the markers are then removed ("<char>0" -> "<char>", a real
  '0' after such a character included). Regex `[[:alnum:]]` and initcap's
  word test are the same glibc iswalnum, and case mapping never moves a
  character in or out of that class (both checked over all of Unicode).
  Only punctuation gets a marker, so the regex engine (costly per match in
  Postgres) runs a few times per value, not once per character.
- trim and truncate: the regex engine is costly per match, and more so with
  capture groups, so trim only matches where there is work (runs of two or
  more white-space characters, or one that is not ' ') and truncate finds the
  head's last white space with one anchored, capture-free match. translate()
  is no help: with a multibyte set it is slower than the regexes. Most values
  need no trim at all: one capture-free test (half the cost) skips the rest.
- math: the first number's text is matched once (a column computed by the
  pass when it can, see sqlgen) and put back with overlay() at its strpos():
  the matched text cannot occur earlier in the value, or a match would start
  there; so no second regex finds the match again.
- math divide: Python divides to 28 significant digits (rounding half away
  from zero). Postgres' `/` rounds at a scale of its own choosing, so the
  quotient is first truncated exactly at 60 decimals with div(), then rounded
  to 28 significant digits; truncating before a half-away-from-zero rounding
  at fewer digits does not change it, so the result is exact for every
  `round` up to 30.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from firefeed.rules import _lists_sql as _lists
from firefeed.rules._conditions_sql import (
    NumberText,
    condition_frag,
    item_template_frag,
    number_frag,
    numeric_frag,
    template_frag,
)
from firefeed.rules._frag import Frag, fmt, join, of, raw, val
from firefeed.rules._text import NUMBER_PATTERN
from firefeed.rules.groups import Aggregate, aggregate_column
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import (
    ELEMENT,
    LIST_ACTIONS,
    Append,
    Capitalize,
    Copy,
    Dedupe,
    FieldAction,
    Join,
    Lowercase,
    MapValues,
    Math,
    Prepend,
    RegexReplace,
    Remove,
    Replace,
    Set,
    Split,
    Take,
    Trim,
    Truncate,
    Uppercase,
)
from firefeed.rules.template import Template
from firefeed.schema.identifiers import ident
from firefeed.textutil import WHITESPACE

Column = Callable[[str], Frag]

_WS_CLASS = "".join(WHITESPACE)  # no character of it is special inside [...]
_PUNCT = f"([^[:alnum:]{_WS_CLASS}])"
#: white space that trim must rewrite: runs of two or more, or a single one that is not ' '
_WS_TO_FOLD = f"[{_WS_CLASS}]{{2,}}|[{_WS_CLASS.replace(' ', '')}]"
#: anything trim would change: two spaces, white space other than ' ', a space at either end
#: (a two-character run with another white space character contains one that is not ' ')
_TRIM_HAS_WORK = f"  |[{_WS_CLASS.replace(' ', '')}]|^ | $"
#: the head up to and including its last white space (longest match, no capture group)
_UP_TO_LAST_WS = f"^.*[{_WS_CLASS}]"
_MATH_OPS = {"add": "+", "subtract": "-", "multiply": "*"}
#: literal maps bigger than this are looked up in a jsonb object (binary search) instead of a CASE
_MAP_JSONB_MIN = 9


def pg_replacement(parts: tuple[str | int, ...]) -> str:
    """regexp_replace's replacement text: a literal backslash doubled, groups as \\n."""
    return "".join(p.replace("\\", "\\\\") if isinstance(p, str) else f"\\{p}" for p in parts)


def _math(action: Math, x: Frag, matched: Frag | None = None) -> Frag:
    """`matched`: the text of x's first number, when already computed (a column); else it is matched inline."""
    n = number_frag(x) if matched is None else numeric_frag(matched)
    if action.op == "divide":
        if action.value.is_zero():
            return x
        q = fmt("div({0} * 1e60, {1})", n, val(action.value, "numeric"))
        # q is the quotient * 10^60, truncated; 88 - digits(q) decimals keep 28 significant digits
        result = fmt("round(round({0} * 1e-60, 88 - length(abs({0})::text)), {1})", q, val(action.round, "integer"))
    else:
        result = fmt(
            "round({0} " + _MATH_OPS[action.op] + " {1}, {2})",
            n,
            val(action.value, "numeric"),
            val(action.round, "integer"),
        )
    if matched is None:
        return fmt("coalesce(regexp_replace({0}, {1}, ({2})::text), {0})", x, val(NUMBER_PATTERN, "text"), result)
    # The first match's text first occurs where the match is: an earlier occurrence would be an
    # earlier match. So overlay() at strpos() replaces the first match without a second regex.
    return fmt(
        "CASE WHEN {1} IS NULL THEN {0} ELSE overlay({0} PLACING ({2})::text FROM strpos({0}, {1}) FOR {3}) END",
        x, matched, result, fmt("char_length({0})", matched),
    )  # fmt: skip


def _trim(x: Frag) -> Frag:
    # Most values need no change; one cheap regex test skips the replacing regex for them.
    return fmt(
        "CASE WHEN {0} ~ {1} THEN btrim(regexp_replace({0}, {2}, ' ', 'g'), ' ') ELSE {0} END",
        x, val(_TRIM_HAS_WORK, "text"), val(_WS_TO_FOLD, "text"),
    )  # fmt: skip


def _truncate(x: Frag, n: int) -> Frag:
    # Past the first n characters: unless the next one is white space, cut the head after its
    # last white space (kept whole when it has none); then drop trailing white space. A text of at
    # most n bytes has at most n characters: its characters are counted only when the bytes don't tell.
    head = fmt("left({0}, {1})", x, val(n, "integer"))
    next_is_ws = fmt("strpos({0}, substr({1}, {2}, 1)) > 0", val(WHITESPACE, "text"), x, val(n + 1, "integer"))
    cut = fmt("coalesce(substring({0} FROM {1}), {0})", head, val(_UP_TO_LAST_WS, "text"))
    return fmt(
        "(CASE WHEN octet_length({0}) <= {1} OR char_length({0}) <= {1} THEN {0}"
        " ELSE rtrim(CASE WHEN {2} THEN {3} ELSE {4} END, {5}) END)",
        x, val(n, "integer"), next_is_ws, head, cut, val(WHITESPACE, "text"),
    )  # fmt: skip


def _map(
    action: MapValues, x: Frag, column: Column, lists: ListFields = NO_LISTS, once: _lists.Once | None = None
) -> Frag:
    """`once`: x is an element; the templates read the item through it (each once per item, #47)."""

    def target(t: Template) -> Frag:
        return item_template_frag(t, column, lists, once)

    fallback = target(action.default) if action.default is not None else x
    if not action.values:
        return fallback
    if len(action.values) >= _MAP_JSONB_MIN and all(t.is_literal for _, t in action.values):
        lookup = json.dumps({k: t.render({}) for k, t in action.values}, ensure_ascii=False)
        return fmt("coalesce({0}::jsonb ->> {1}, {2})", val(lookup), x, fallback)
    whens = join((fmt("WHEN {0} THEN {1}", val(k, "text"), target(t)) for k, t in action.values), " ")
    return fmt("(CASE {0} {1} ELSE {2} END)", x, whens, fallback)


def _removes(action: Remove, element: Frag, column: Column, lists: ListFields, once: _lists.Once | None = None) -> Frag:
    """Whether `remove` drops `element`: its condition reads `_` as the element, one text, whatever the
    project's list fields (P20); `once`: its templates read the item through it (once per item, #47)."""
    return condition_frag(
        action.when, lambda n: element if n == ELEMENT else column(n), None, lists.without(ELEMENT), once=once
    )


def _text_action(action: FieldAction, x: Frag, column: Column, lists: ListFields) -> Frag:
    """An action on a text field (or on one element); a text is a one-element list for the list actions (P2)."""
    if isinstance(action, Join | Dedupe | Split):
        return x  # a text has nothing to join or repeat; split only targets list fields
    if isinstance(action, Take):
        return x if action.count > 0 else raw("''::text")
    if isinstance(action, Remove):
        return fmt("(CASE WHEN {0} <> '' AND {1} THEN ''::text ELSE {0} END)", x, _removes(action, x, column, lists))
    return action_frag(action, column, None, lists, subject=x)


#: per-element actions whose result on "" may be a non-empty text (P11: on no elements they act on "")
_FROM_NOTHING = (MapValues, RegexReplace)


def _list_action(action: FieldAction, column: Column, lists: ListFields) -> Frag:
    """The new value of a list field (a text[]) after `action` (SPEC 9).

    A text held there keeps its kind through the actions that rewrite elements; `set`, `join`, a
    copied text, an aggregate's or a lookup's value write one; `split` and `append`/`prepend` on a
    declared field give a list (`_lists_sql.from_text`, P2, P12)."""
    x = column(action.field)
    if isinstance(action, Aggregate):
        total = of(ident(aggregate_column(action.tag)))
        return total if action.keeps_list(lists) else _lists.from_text(total)
    if isinstance(action, LookupSet):
        return lookup_part_frag(action, x, column, lists, into_list=True)
    if isinstance(action, Set):
        return _lists.from_text(template_frag(action.value, column, lists))
    if isinstance(action, Copy):
        source = column(action.source)
        return source if action.source in lists else _lists.from_text(source)
    if isinstance(action, Append | Prepend):
        return _add_element(action, x, template_frag(action.value, column, lists), lists)
    if isinstance(action, Split):
        return _lists.split(x, action.separator)
    if isinstance(action, Join):
        return _lists.from_text(_lists.join_elements(x, action.separator))
    if isinstance(action, Take):
        if action.count == 0:
            return _lists.EMPTY_LIST
        count = val(action.count, "integer")
        return _lists.list_only(x, lambda v: fmt("({0})[1:{1}]", v, count))
    if isinstance(action, Dedupe):
        return _lists.list_only(x, _lists.dedupe)
    if isinstance(action, Remove):
        remove = action

        def kept(v: Frag) -> Frag:
            once = _lists.Once(element_field=ELEMENT)
            return _lists.keep_elements(v, fmt("NOT {0}", _removes(remove, _lists.ELEMENT, column, lists, once)), once)

        return _lists.kept_kind(x, kept)

    def on(subject: Frag, once: _lists.Once | None = None) -> Frag:
        return action_frag(action, column, None, lists, subject=subject, once=once)

    def each(v: Frag) -> Frag:
        once = _lists.Once()
        return _lists.each_element(v, on(_lists.ELEMENT, once), once)

    if isinstance(action, _FROM_NOTHING):
        # P11: on no elements the action acts on the text "" (and writes a text)
        return _lists.read_once(
            x,
            lambda v: fmt(
                "(CASE WHEN cardinality({0}) = 0 THEN {1} ELSE {2} END)",
                v,
                _lists.from_text(on(raw("''::text"))),
                _lists.kept_kind(v, each),
            ),
        )
    return _lists.kept_kind(x, each)


def _add_element(action: Append | Prepend, x: Frag, text: Frag, lists: ListFields) -> Frag:
    """`append`/`prepend` on a list field: one element added when the field is declared in a source's
    `lists` or its value is a list (a text there counts as one element, "" as none); on a text of a
    field no source declares they concatenate, as on any text (P12)."""

    def added(v: Frag, t: Frag) -> Frag:
        one = _lists.one_element(t)
        return fmt("({0} || {1})" if isinstance(action, Append) else "({1} || {0})", _lists.as_list(v), one)

    if action.field in lists.declared:
        # a template that renders "" adds nothing: a text held there stays a text (P12)
        return _lists.read_once(
            text, lambda t: fmt("(CASE WHEN {0} = '' THEN {1} ELSE {2} END)", t, x, added(x, t)), alias="_ff_t"
        )

    def either(v: Frag) -> Frag:
        def of_kind(t: Frag) -> Frag:
            text_of = (
                "(array_to_string({0}, '') || {1})"
                if isinstance(action, Append)
                else "({1} || array_to_string({0}, ''))"
            )
            joined = fmt(text_of, v, t)
            # a text (from 0) or no elements concatenate; any other array is a list
            return fmt(
                "(CASE WHEN coalesce(array_lower({0}, 1), 0) = 0 THEN {2} ELSE {1} END)",
                v,
                added(v, t),
                _lists.from_text(joined),
            )

        return _lists.read_once(text, of_kind, alias="_ff_t")

    return _lists.read_once(x, either)


def action_frag(
    action: FieldAction,
    column: Column,
    number_text: NumberText | None = None,
    lists: ListFields = NO_LISTS,
    *,
    subject: Frag | None = None,
    once: _lists.Once | None = None,
) -> Frag:
    """The SQL for the field's value after `action`; `column(f)` gives f's value before it,
    `number_text(f)` (optional) the text of the first number of that value when already computed,
    `lists` the project's list fields (SPEC 9); `subject`: the one text the action rewrites (an
    element of the list field) instead of the field's value (templates still read the item's fields,
    through `once` when given: `_lists_sql.Once`)."""
    if subject is None:
        if action.field in lists:
            return _list_action(action, column, lists)
        if isinstance(action, LIST_ACTIONS):
            return _text_action(action, column(action.field), column, lists)
    x = column(action.field) if subject is None else subject
    if isinstance(action, Set):
        return template_frag(action.value, column, lists)
    if isinstance(action, Copy):
        return column(action.source)
    if isinstance(action, Append):
        return fmt("({0} || {1})", x, template_frag(action.value, column, lists))
    if isinstance(action, Prepend):
        return fmt("({0} || {1})", template_frag(action.value, column, lists), x)
    if isinstance(action, Replace):
        return fmt("replace({0}, {1}, {2})", x, val(action.find, "text"), val(action.with_, "text"))
    if isinstance(action, RegexReplace):
        return fmt(
            "regexp_replace({0}, {1}, {2}, 'gi')"
            if action.pattern.ignore_case
            else "regexp_replace({0}, {1}, {2}, 'g')",
            x,
            val(action.pattern.pg, "text"),
            val(pg_replacement(action.with_), "text"),
        )
    if isinstance(action, Lowercase):
        return fmt("lower({0})", x)
    if isinstance(action, Uppercase):
        return fmt("upper({0})", x)
    if isinstance(action, Capitalize):
        marked = fmt("regexp_replace({0}, {1}, '\\10', 'g')", x, val(_PUNCT, "text"))
        return fmt("regexp_replace(initcap({0}), {1}, '\\1', 'g')", marked, val(_PUNCT + "0", "text"))
    if isinstance(action, Trim):
        return _trim(x)
    if isinstance(action, Truncate):
        return _truncate(x, action.length)
    if isinstance(action, Math):
        return _math(action, x, number_text(action.field) if number_text is not None else None)
    if isinstance(action, LookupSet):
        return lookup_part_frag(action, x, column, lists)
    if isinstance(action, Aggregate):
        return of(ident(aggregate_column(action.tag)))
    assert isinstance(action, MapValues)
    return _map(action, x, column, lists, once)


def lookup_key_column(tag: str) -> str:
    """The column of a joined lookup row's key (NULL: no row matched)."""
    return f"_ff_lk{tag}"


def lookup_value_column(tag: str, j: int) -> str:
    """The column of the joined row's `j`-th column the action reads."""
    return f"_ff_lk{tag}_{j}"


def lookup_part_frag(
    part: LookupSet, x: Frag, column: Column, lists: ListFields = NO_LISTS, *, into_list: bool = False
) -> Frag:
    """A matched item takes the row's column (even ""), an unmatched one the default, else its value (P21).

    `into_list`: the target is a list field (`x` a text[]): a written text is one element, "" none."""

    def written(text: Frag) -> Frag:
        return _lists.from_text(text) if into_list else text

    matched = (
        x if part.column is None else written(of(ident(lookup_value_column(part.tag, part.columns.index(part.column)))))
    )
    unmatched = written(template_frag(part.default, column, lists)) if part.default is not None else x
    return fmt(
        "CASE WHEN {0} IS NOT NULL THEN {1} ELSE {2} END", of(ident(lookup_key_column(part.tag))), matched, unmatched
    )
