"""List fields in SQL (SPEC 9): a list field's value is a `text[]` whose elements are never "".

Set-based like the rest of the rules: a condition on a list is an EXISTS over
`unnest()` of the row's own array, a per-element action an `ARRAY(SELECT ...
FROM unnest(...) WITH ORDINALITY ...)` that keeps the elements' order and
drops the ones an action left "" (P1). The aliases `_ff_u`, `_ff_e`, `_ff_o`
can never be a field's column (`column_for_field` moves names starting with
`_ff` aside), so a field named `e` still means the row's column inside them.

Only fields in the project's `ListFields` reach these helpers; every other
field compiles exactly as it did before section 9.

What a per-element expression reads of the item (a template's `{tags[0]}`) is the
same for every element, and is bound once per item around the `unnest()`
subquery (`Once`), never computed inside it, so the work stays linear in the
elements (issue #47).
"""

from __future__ import annotations

from collections.abc import Callable

from psycopg2 import sql

from firefeed.rules._frag import Frag, fmt, join, of, raw, val
from firefeed.rules._scalars import WHOLE_MAX
from firefeed.rules.template import FieldRef, Template
from firefeed.textutil import WHITESPACE

EMPTY_LIST = raw("'{}'::text[]")
#: the element inside an unnest() of the helpers below
ELEMENT = raw("_ff_e")


def as_text(value: Frag) -> Frag:
    """A list as text: its elements joined with "," (`{images}`)."""
    return fmt("array_to_string({0}, ',')", value)


def element(value: Frag, index: int) -> Frag:
    """Element `index` of a list (negative: from the end), "" when out of range (P9).

    Counted from the array's own bounds, so a text (lower bound 0) and a list (1) read alike."""
    if abs(index) >= WHOLE_MAX:  # past any list (Postgres' hold 134,217,727 elements) and any bound integer
        return raw("''::text")
    if index >= 0:
        at = "array_lower({0}, 1) + {1}", val(index, "integer")
    else:
        at = "array_upper({0}, 1) + {1}", val(index + 1, "integer")
    return read_once(value, lambda v: fmt("coalesce(({0})[" + at[0] + "], '')", v, at[1]))


def text_element(value: Frag, index: int) -> Frag:
    """Element `index` of a text: a text is a one-element list, "" has none (P2)."""
    return value if index in (0, -1) else raw("''::text")


def from_text(text: Frag) -> Frag:
    """A text written into a list field (`set`, `join`, a copied text...): the text kind, "" none (P1, P2).

    Its array's lower bound is 0 (`[0:0]={a}`), a list's is 1: only json/jsonl and
    `append`/`prepend` tell them apart (P2, P12), everything else reads the elements."""
    return fmt("array_remove(array_fill({0}, ARRAY[1], ARRAY[0]), '')", text)


def one_element(text: Frag) -> Frag:
    """A list of one element, the text ("" none): what `append`/`prepend` add (P12)."""
    return fmt("array_remove(ARRAY[{0}], '')", text)


def as_list(value: Frag) -> Frag:
    """The value as a list (a text becomes a one-element list): `[:]` re-bases any array at 1."""
    return fmt("({0})[:]", value)


def kept_kind(value: Frag, result: Callable[[Frag], Frag]) -> Frag:
    """`result(value)` (an element-wise rewrite: each element gives at most one) of the same kind as
    `value`: a text stays a text (P2: per-element actions, `take`, `dedupe`, `remove` act on a text as on
    a one-element list, and leave a text)."""

    def kinded(x: Frag) -> Frag:
        # A text's rewrite (at most one element) is moved to start at 0: put after a NULL at 0, the NULL
        # then removed (elements are never NULL); a list's is left as it is (array_cat of '{}' is it).
        start = fmt("(CASE WHEN array_lower({0}, 1) = 0 THEN '[0:0]={NULL}'::text[] ELSE '{}'::text[] END)", x)
        return fmt("array_remove(array_cat({0}, {1}), NULL)", start, result(x))

    return read_once(value, kinded)


def list_only(value: Frag, on_list: Callable[[Frag], Frag]) -> Frag:
    """`on_list(value)` on a list; a text is left as it is (`take` of at least one, `dedupe`: P10)."""
    return read_once(value, lambda v: fmt("(CASE WHEN array_lower({0}, 1) = 0 THEN {0} ELSE {1} END)", v, on_list(v)))


def read_once(value: Frag, use: Callable[[Frag], Frag], alias: str = "_ff_a") -> Frag:
    """`use(v)`, where v is `value` computed once per row however often `use` names it: a column is
    simply named again, anything else is bound once in a subquery (`OFFSET 0` keeps Postgres from
    copying the expression back into each use)."""
    if isinstance(value.sql, sql.Identifier):
        return use(value)
    name = of(sql.Identifier(alias))
    return fmt("(SELECT {1} FROM (SELECT {0} AS {2} OFFSET 0) AS _ff_k)", value, use(name), name)


class Once:
    """The values a per-element expression reads of the item, bound once per item around it.

    Inside the `unnest()` subquery each element would compute them again, and reading a list
    there is a subscript of the whole stored array, which Postgres unpacks (detoasts) anew for
    every element and walks up to the index: `map`'s `default: "{tags[0]}"` on one 15,000-element
    list took 13 s, on a 1M-element one it ran to the statement timeout (#47). Bound by `bind`,
    every element reads one plain value. A column is named again as it is (no work to save).

    The names (`_ff_h<i>`) can never be a field's column; a per-element expression holds no other
    `Once`'s names, and one nested inside a bound value binds its own nearer, so they never mix.
    `element_field`: the field name that reads the element itself (`_` in a `remove` condition,
    P20): a template naming it differs per element and is computed inside, its other references
    each bound once (`item_ref`).
    """

    def __init__(self, element_field: str | None = None) -> None:
        self._bound: list[tuple[Frag, Frag]] = []
        self._element_field = element_field

    def reads_element(self, template: Template) -> bool:
        return self._element_field in template.fields

    def item_ref(self, ref: FieldRef, value: Frag) -> Frag:
        """A template reference's `value`, by name, unless it reads the element."""
        return value if ref.name == self._element_field else self(value)

    def __call__(self, value: Frag) -> Frag:
        """The name `value` (the same for every element) goes by inside the expression `bind` wraps."""
        if isinstance(value.sql, sql.Identifier):
            return value
        name = of(sql.Identifier(f"_ff_h{len(self._bound)}"))
        self._bound.append((name, value))
        return name

    def bind(self, expr: Frag) -> Frag:
        """`expr` with the values it reads by name computed once first (`OFFSET 0`: not copied back in)."""
        if not self._bound:
            return expr
        values = join((fmt("{0} AS {1}", value, name) for name, value in self._bound), ", ")
        return fmt("(SELECT {0} FROM (SELECT {1} OFFSET 0) AS _ff_hk)", expr, values)


def _bound(once: Once | None, expr: Frag) -> Frag:
    return expr if once is None else once.bind(expr)


def count(value: Frag) -> Frag:
    """How many elements `count_*` counts: a list's; a text (lower bound 0) one, a blank text none (P8,
    as `empty` reads it: a text written by `set` may be white space, a list's elements never "")."""

    def counted(v: Frag) -> Frag:
        ws = val(WHITESPACE, "text")
        blank = fmt("(array_lower({0}, 1) = 0 AND btrim(({0})[0], {1}) = '')", v, ws)
        return fmt("(CASE WHEN {1} THEN 0 ELSE cardinality({0}) END)", v, blank)

    return read_once(value, counted)


def any_element(value: Frag, test: Frag, on_empty: Frag, once: Once | None = None) -> Frag:
    """`test` (over ELEMENT) holds for some element; with no elements, `on_empty` (the test on "", P7).

    `once`: the item's values `test` reads by name (bound only when there are elements)."""
    exists = fmt("EXISTS (SELECT 1 FROM unnest({0}) AS _ff_u(_ff_e) WHERE {1})", value, test)
    return fmt("(CASE WHEN cardinality({0}) = 0 THEN {1} ELSE {2} END)", value, on_empty, _bound(once, exists))


def every_element(value: Frag, test: Frag) -> Frag:
    """`test` (over ELEMENT) holds for every element (true with none)."""
    return fmt("(NOT EXISTS (SELECT 1 FROM unnest({0}) AS _ff_u(_ff_e) WHERE NOT {1}))", value, test)


def each_element(value: Frag, result: Frag, once: Once | None = None) -> Frag:
    """The list of `result` (over ELEMENT) for each element, in order, without the "" ones (P1);
    `once`: the item's values `result` reads by name."""
    return _bound(
        once,
        fmt(
            "ARRAY(SELECT _ff_x FROM (SELECT {1} AS _ff_x, _ff_o "
            "FROM unnest({0}) WITH ORDINALITY AS _ff_u(_ff_e, _ff_o)) AS _ff_s WHERE _ff_x <> '' ORDER BY _ff_o)",
            value,
            result,
        ),
    )


def keep_elements(value: Frag, keep: Frag, once: Once | None = None) -> Frag:
    """The elements for which `keep` (over ELEMENT) holds, in order; `once`: the item's values `keep` reads by name."""
    return _bound(
        once,
        fmt(
            "ARRAY(SELECT _ff_e FROM unnest({0}) WITH ORDINALITY AS _ff_u(_ff_e, _ff_o) WHERE {1} ORDER BY _ff_o)",
            value,
            keep,
        ),
    )


def split(value: Frag, separator: str) -> Frag:
    """Each element cut at `separator` (literal), the pieces trimmed (Unicode white space), empty ones dropped."""
    piece = fmt("btrim(_ff_p, {0})", val(WHITESPACE, "text"))
    return fmt(
        "ARRAY(SELECT _ff_x FROM (SELECT {1} AS _ff_x, _ff_o, _ff_q "
        "FROM unnest({0}) WITH ORDINALITY AS _ff_u(_ff_e, _ff_o), "
        "unnest(string_to_array(_ff_e, {2})) WITH ORDINALITY AS _ff_v(_ff_p, _ff_q)) AS _ff_s "
        "WHERE _ff_x <> '' ORDER BY _ff_o, _ff_q)",
        value,
        piece,
        val(separator, "text"),
    )


def dedupe(value: Frag) -> Frag:
    """The elements without later repeats (exact match), in order."""
    return fmt(
        "ARRAY(SELECT _ff_e FROM unnest({0}) WITH ORDINALITY AS _ff_u(_ff_e, _ff_o) "
        "GROUP BY _ff_e ORDER BY min(_ff_o))",
        value,
    )


def join_elements(value: Frag, separator: str) -> Frag:
    return fmt("array_to_string({0}, {1})", value, val(separator, "text"))
