"""The rule language compiled to SQL: conditions, and the one statement a pass runs.

A pass is `INSERT INTO dst SELECT ... FROM (levels...) FROM src`. Each level is
up to three nested subqueries kept apart by `OFFSET 0` (so Postgres does not
fold them together and compute an expression once per use):

    H: SELECT <every column>, substring(<field> FROM <number>) AS _ff_n<k> FROM (previous) OFFSET 0
    F: SELECT <every column>, <when of each rule starting here> AS _ff_m<i> FROM (H) OFFSET 0
    V: SELECT <every column, CASE WHEN _ff_m<i> THEN <then> ELSE <else> END for changed ones>
       FROM (F) [WHERE <the excluding rule lets the row through>] OFFSET 0

H computes the text of a field's first number (the costly regex of number
reading) once, when several conditions or actions of the pass read that same
value, or a math action reads it (it needs the matched text three times). Such
a column rides along until its field is written or nobody reads it again; it
is never written to the pass table. H and F only read the values their level
starts with, so when the previous V wrote none of the fields they read, their
columns are computed in that V instead of a subquery of their own (a
subquery costs about as much as a cheap expression per row and column).

The flags are written to the pass table too, so the statement's RETURNING
counts the matches without a second scan. Identifiers only come from
firefeed.schema.identifiers.ident; every value is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg2 import sql

from firefeed.rules import _lists_sql as _lists
from firefeed.rules._actions_sql import action_frag, lookup_key_column, lookup_value_column
from firefeed.rules._conditions_sql import condition_frag, number_frag, number_text_frag, template_frag
from firefeed.rules._frag import Frag, fmt, join, of, raw, val
from firefeed.rules._lists_sql import EMPTY_LIST
from firefeed.rules._plan import (
    GROUP_TEXT_COLUMN,
    PassPlan,
    Step,
    flag_column,
    lookup_report_columns,
    only_excludes,
)
from firefeed.rules.groups import GROUP_FIRST_COLUMN, JOIN_MAX_CHARS, Aggregate, GroupFirst, aggregate_column
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import (
    AllOf,
    AnyOf,
    Condition,
    FieldAction,
    Leaf,
    Math,
    Not,
    branch_excludes,
    condition_fields,
)
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, ident
from firefeed.textutil import WHITESPACE


def condition_sql(
    cond: Condition,
    column: Callable[[str], sql.Composable],
    params: list[Any],
    lists: ListFields = NO_LISTS,
    table: sql.Composable | None = None,
) -> sql.Composable:
    """A boolean SQL expression for `cond` that is never NULL.

    `column(field)` returns the SQL of a field's current value (a quoted column,
    or ''::text when the table lacks it; `'{}'::text[]` for a list field);
    literal values are appended to `params`, in the order of their `%s` placeholders.
    `table`: the table the condition filters, which a group_first leaf reads its groups from (P19).
    """
    if table is None:
        frag = condition_frag(cond, lambda name: of(column(name)), None, lists)
    else:

        def first(leaf: GroupFirst) -> Frag:
            group = of(column(leaf.group))
            return first_of_group_in(table, _lists.as_text(group) if leaf.group in lists else group)

        frag = condition_frag(cond, lambda name: of(column(name)), None, lists, first=first)
    params.extend(frag.params)
    return frag.sql


_NUMBER_OPS = ("gt", "gte", "lt", "lte")


def _number_leaf_fields(cond: Condition) -> list[str]:
    """The fields whose number the condition reads, once per reading leaf."""
    if isinstance(cond, Leaf):
        return [cond.field] if cond.op in _NUMBER_OPS else []
    if isinstance(cond, GroupFirst):
        return []
    if isinstance(cond, Not):
        return _number_leaf_fields(cond.item)
    assert isinstance(cond, AllOf | AnyOf)
    return [f for c in cond.items for f in _number_leaf_fields(c)]


def _number_reads(step: Step) -> list[tuple[str, bool]]:
    """(field, by a math action that always runs) for each reading of a level-start value's number.

    A list field's numbers are read per element (`_lists_sql`), never as one column.
    """
    lists = step.rule.lists
    reads: list[tuple[str, bool]] = []
    if step.first and step.rule.when is not None:
        reads.extend((f, False) for f in _number_leaf_fields(step.rule.when) if f not in lists)
    for chain in (step.then, step.else_):
        written: set[str] = set()
        for action in chain:
            no_op = isinstance(action, Math) and action.op == "divide" and action.value.is_zero()
            if isinstance(action, Math) and action.field not in written and not no_op and action.field not in lists:
                reads.append((action.field, step.rule.when is None))
            written.add(action.field)
    return reads


def _col(name: str) -> Frag:
    return of(ident(name))


def _as(expr: Frag, name: str) -> Frag:
    return fmt("{0} AS {1}", expr, _col(name))


def chunk_filter(lo: int | None, hi: int | None) -> Frag | None:
    """`_ff_ord BETWEEN lo AND hi` (either end open when None); None for the whole table."""
    parts = []
    if lo is not None:
        parts.append(fmt("{0} >= {1}", _col(ORD), val(lo, "bigint")))
    if hi is not None:
        parts.append(fmt("{0} <= {1}", _col(ORD), val(hi, "bigint")))
    return join(parts, " AND ") if parts else None


def pages_filter(lo: int | None, hi: int | None) -> Frag | None:
    """The rows on heap pages [lo, hi) of the table aliased t (either end open when None): a TID range
    scan reads just those pages, with no index and no statistics."""
    parts = []
    if lo is not None:
        parts.append(fmt("t.ctid >= {0}", val(f"({lo},0)", "tid")))
    if hi is not None:
        parts.append(fmt("t.ctid < {0}", val(f"({hi},0)", "tid")))
    return join(parts, " AND ") if parts else None


def _cut(lo: int | None, hi: int | None, pages: bool) -> Frag | None:
    return pages_filter(lo, hi) if pages else chunk_filter(lo, hi)


@dataclass
class _Layer:
    """A subquery not yet nested: new values of some fields, and new columns (flags, number texts)."""

    values: dict[str, Frag] = field(default_factory=dict)  # field -> its new value
    new_fields: list[str] = field(default_factory=list)  # fields this layer creates (in `values` too)
    extra: list[tuple[str, Frag]] = field(default_factory=list)  # new flag and number columns
    drop: set[str] = field(default_factory=set)  # carried columns not passed on
    where: Frag | None = None


class _Builder:
    """Walks a pass's levels, stacking subqueries over the source table.

    The flags (and number texts) a level starts with only read values the level
    starts with: when the previous level's values subquery wrote none of them,
    they are computed in that same subquery instead of one of their own.
    """

    def __init__(
        self, plan: PassPlan, source: sql.Composable, where: Frag | None, groups: sql.Composable | None = None
    ) -> None:
        self.plan = plan
        # Lookup tables live in the schema of the table the pass reads (a company's, or a scratch area's).
        self.schema = source.strings[0] if isinstance(source, sql.Identifier) and len(source.strings) == 2 else None
        self.report_cols = {c for _, part in plan.lookups for c, _ in lookup_report_columns(part.tag)}
        # Columns that ride along for the rules but are not the pass table's: lookup reports go last
        # in their own order, the grouped join's columns not at all.
        self.hidden = set(self.report_cols)
        self.level_keys: list[str] = []  # the current level's lookup keys (`_start_lookup_keys`)
        self.fields = list(plan.fields_in)  # fields that are columns of the current relation
        self.carried: list[str] = []  # flag and number columns of the current relation
        self.relation = fmt("{0} AS t", of(source))
        self.where = where  # applies to the first subquery that reads the table
        self.numbers: dict[str, str] = {}  # field -> column holding the text of its current value's first number
        self.pending: _Layer | None = None  # the subquery being built over the current relation
        self._plan_numbers()
        if plan.grouped:
            self.relation = self._grouped(source, groups)
            self.carried = [GROUP_FIRST_COLUMN, *(aggregate_column(a.tag) for a in plan.aggregates)]
            self.hidden.update(self.carried)

    def _plan_numbers(self) -> None:
        """Which level-start values get their number text computed once: at which level, read until which."""
        version: dict[str, int] = {}
        reads: dict[tuple[str, int], list[tuple[int, bool]]] = {}
        for i, level in enumerate(self.plan.levels):
            for step in level:
                for name, always in _number_reads(step):
                    reads.setdefault((name, version.get(name, 0)), []).append((i, always))
            for step in level:
                for name in step.writes:
                    version[name] = version.get(name, 0) + 1
        self.number_at: dict[int, list[str]] = {}  # level -> fields whose number column starts there
        self.number_until: dict[str, int] = {}  # number column -> last level reading it
        self._number_until: dict[tuple[str, int], int] = {}  # (field, first level) -> last reading level
        for (name, _), uses in reads.items():
            if len(uses) >= 2 or any(always for _, always in uses):
                first = uses[0][0]
                self.number_at.setdefault(first, []).append(name)
                self._number_until[(name, first)] = uses[-1][0]

    def number_text(self, name: str) -> Frag | None:
        return _col(self.numbers[name]) if name in self.numbers else None

    def base(self, name: str) -> Frag:
        if name in self.fields:
            return _col(column_for_field(name))
        return EMPTY_LIST if name in self.plan.lists else raw("''::text")

    def _select(self, items: list[Frag], where: Frag | None, barrier: bool) -> Frag:
        conds = [w for w in (self.where, where) if w is not None]
        self.where = None
        text = fmt("SELECT {0} FROM {1}", join(items, ", "), self.relation)
        if conds:
            text = fmt("{0} WHERE {1}", text, join(conds, " AND "))
        return fmt("{0} OFFSET 0", text) if barrier else text

    def _layer(self, reads: set[str], columns: set[str]) -> _Layer:
        """The pending subquery when it wrote none of the fields `reads` and made none of `columns`; else a new one."""
        layer = self.pending
        if layer is not None and (reads & set(layer.values) or columns & {c for c, _ in layer.extra}):
            self._flush()
            layer = None
        if layer is None:
            layer = self.pending = _Layer()
        return layer

    def _flush(self) -> None:
        """Nest the pending subquery: the current relation becomes it."""
        layer = self.pending
        if layer is None:
            return
        self.pending = None
        items = [_col(ORD), _col(KEY), _col(SRC)]
        for name in self.fields + layer.new_fields:
            col = column_for_field(name)
            items.append(_as(layer.values[name], col) if name in layer.values else _col(col))
        items.extend(_col(c) for c in self.carried if c not in layer.drop)
        items.extend(_as(expr, c) for c, expr in layer.extra)
        self.relation = fmt("({0}) AS t", self._select(items, layer.where, barrier=True))
        self.fields.extend(layer.new_fields)
        self.carried = [c for c in self.carried if c not in layer.drop] + [c for c, _ in layer.extra]

    def _start_numbers(self, i: int) -> None:
        """The number texts first read at level i, from the values the level starts with."""
        names = self.number_at.get(i, [])
        if not names:
            return
        layer = self._layer(set(names), set())
        for name in names:
            col = f"_ff_n{len(self.number_until) + 1}"
            layer.extra.append((col, number_text_frag(self.base(name))))
            self.numbers[name] = col
            self.number_until[col] = self._number_until[(name, i)]

    def _start_flags(self, level: tuple[Step, ...]) -> None:
        rules = [s.rule for s in level if s.first and s.rule.when is not None]
        if not rules:
            return
        reads = {f for r in rules if r.when is not None for f in condition_fields(r.when)}
        layer = self._layer(reads, {self.numbers[f] for f in reads if f in self.numbers})
        for rule in rules:
            assert rule.when is not None
            layer.extra.append(
                (flag_column(rule), condition_frag(rule.when, self.base, self.number_text, self.plan.lists))
            )

    def _end_numbers(self, i: int, level: tuple[Step, ...], layer: _Layer) -> None:
        """After level i's values: drop number columns of rewritten fields and of values nobody reads again."""
        written = {n for step in level for n in step.writes}
        for name, col in list(self.numbers.items()):
            if name in written or self.number_until[col] <= i:
                del self.numbers[name]
                layer.drop.add(col)

    def _chain(self, actions: tuple[FieldAction, ...], earlier: dict[str, Frag]) -> dict[str, Frag]:
        """Each written field's new value; `earlier` holds values an earlier step of the level wrote."""
        current: dict[str, Frag] = {}

        def value(n: str) -> Frag:
            return current[n] if n in current else earlier[n] if n in earlier else self.base(n)

        for action in actions:
            current[action.field] = action_frag(
                action, value, lambda n: None if n in current or n in earlier else self.number_text(n), self.plan.lists
            )
        return current

    def _values(self, level: tuple[Step, ...]) -> dict[str, Frag]:
        values: dict[str, Frag] = {}
        for step in level:
            # A step rewriting a field an earlier step of the level wrote reads that value once (_plan).
            earlier = {n: values[n] for n in step.writes if n in values}
            then, else_ = self._chain(step.then, earlier), self._chain(step.else_, earlier)
            for name in step.writes:
                before = earlier.get(name, self.base(name))
                yes, no = then.get(name, before), else_.get(name, before)
                if step.rule.when is None:
                    values[name] = yes
                else:
                    values[name] = fmt("CASE WHEN {0} THEN {1} ELSE {2} END", _col(flag_column(step.rule)), yes, no)
        return values

    def _grouped(self, source: sql.Composable, groups: sql.Composable | None) -> Frag:
        """The pass's table joined to one grouped aggregate (P16-P19): per group, the first position and
        each aggregate. A blank group value makes an item a group of its own (P18).

        Without `groups` the aggregate is computed here, from the table itself. With it (a table
        `groups_select` filled from the whole pass input, indexed by its keys), the items are joined to
        it: as the planner likes, hashed (the items read in order, each finding its group in the hash)
        or by an index probe per item. A statement that writes rows checks its plan keeps the items'
        order (executor.keeps_order) and else probes. Each item's group value is computed once, below
        a barrier (`_ff_gt`): written into the join's condition, a hash join computed it four times an
        item (two hash keys, then both again to check a match), ~1 us each on 1M items.
        """
        group = self.plan.group
        assert group is not None
        rows = of(groups) if groups is not None else fmt("({0})", self.group_rows(of(source)))
        key = fmt("t.{0}", _col(GROUP_TEXT_COLUMN))
        if self.plan.keyed_input:
            # The writer of the table computed each item's group value (`PassPlan.keys_group`): no barrier.
            return _group_join(fmt("{0} AS t", of(source)), rows, key)
        mine = self.group_text(group)
        if groups is None:
            return _group_join(fmt("{0} AS t", of(source)), rows, mine)
        keyed = fmt("SELECT t.*, {0} AS {1} FROM {2} AS t", mine, _col(GROUP_TEXT_COLUMN), of(source))
        if self.where is not None:  # the cut reads the table's own rows (t.ctid): inside, below the join
            keyed, self.where = fmt("{0} WHERE {1}", keyed, self.where), None
        return _group_join(fmt("({0} OFFSET 0) AS t", keyed), rows, key)

    def group_rows(self, members: Frag) -> Frag:
        """One row per group of the items of `members` (a relation): its keys, first position and aggregates."""
        group = self.plan.group
        assert group is not None
        inner = [_as(self.group_text(group), "_ff_g"), _as(_col(ORD), "_ff_go")]
        for a in self.plan.aggregates:
            inner.extend(self._member_values(a))
        # A volatile column keeps Postgres from folding this subquery into the aggregate, which would
        # compute each member's values once per use (the group value twice, a min's number twice:
        # its value and its scale; 1M items: 1.5 s -> 1.1 s). OFFSET 0 would do it too, but a LIMIT
        # node cannot be split among parallel workers; clock_timestamp() is parallel safe.
        inner.append(raw('clock_timestamp() AS "_ff_gb"'))
        outer = [
            raw('"_ff_g" AS "_ff_gk"'),
            raw('"_ff_g2" AS "_ff_gk2"'),
            _as(raw('min("_ff_go")'), GROUP_FIRST_COLUMN),
        ]
        outer.extend(_as(_aggregate_frag(a, self.plan.lists), aggregate_column(a.tag)) for a in self.plan.aggregates)
        values = fmt(
            'SELECT *, CASE WHEN "_ff_g" = \'\' THEN "_ff_go" ELSE -1 END AS "_ff_g2" FROM (SELECT {0} FROM {1}) AS s0',
            join(inner, ", "),
            members,
        )
        return fmt("SELECT {0} FROM ({1}) AS s1 GROUP BY 1, 2", join(outer, ", "), values)

    def group_text(self, group: str) -> Frag:
        """An item's group value: the group field's text (a list's elements joined with ","), trimmed (P18);
        the column the input's writer computed it into, when there is one."""
        if self.plan.keyed_input and group == self.plan.group:
            return _col(GROUP_TEXT_COLUMN)
        return self.group_text_of(self.base(group), group)

    def group_text_of(self, value: Frag, group: str) -> Frag:
        """`value` of group field `group` as a group value (P18)."""
        return trimmed_frag(_lists.as_text(value) if group in self.plan.lists else value)

    def _member_values(self, a: Aggregate) -> list[Frag]:
        """A member's columns for aggregate `a`: `_ff_gv<tag>`, its value (a number for min/max/sum), and
        for min/max/sum over a list's elements without `round`, `_ff_gs<tag>`, their largest scale."""
        if a.of is None:
            return []
        column = f"_ff_gv{a.tag}"
        if not a.over_list(self.plan.lists):
            value = template_frag(a.of, self.base, self.plan.lists)
            return [_as(number_frag(value) if a.op in ("min", "max", "sum") else value, column)]
        assert a.of_field is not None
        elements = self.base(a.of_field)
        if a.op in ("first", "last"):
            # its text form: array_agg cannot hold lists of different lengths; text[] -> text -> text[] is exact
            return [_as(fmt("({0})::text", elements), column)]
        if a.op == "join":
            return [_as(_lists.join_elements(elements, a.separator), column)]  # elements are never ""
        n = number_frag(_lists.ELEMENT)
        out = [_as(fmt("(SELECT " + a.op + "({1}) FROM unnest({0}) AS _ff_u(_ff_e))", elements, n), column)]
        if a.round is None:
            out.append(
                _as(fmt("(SELECT max(scale({1})) FROM unnest({0}) AS _ff_u(_ff_e))", elements, n), f"_ff_gs{a.tag}")
            )
        return out

    def _start_lookup_keys(self, level: tuple[Step, ...]) -> None:
        """The trimmed value each lookup of the level (on a field that is not a list) matches, as a column
        of the relation it joins: written into the join's condition, the hash join computed it three times
        an item (its hash, the match's check, the report), ~0.3 us each (1M catalog items: 0.35 s a half)."""
        keyed = [part for _, part, _ in self._level_lookups(level) if part.match not in self.plan.lists]
        if not keyed:
            return
        layer = self._layer({part.match for part in keyed}, set())
        for part in keyed:
            column = lookup_match_column(part.tag)
            layer.extra.append((column, trimmed_frag(self.base(part.match))))
            self.hidden.add(column)
            self.level_keys.append(column)

    def _level_lookups(self, level: tuple[Step, ...]) -> list[tuple[Step, LookupSet, bool]]:
        """The lookup actions of a level: (step, first part, in the then branch)."""
        out: list[tuple[Step, LookupSet, bool]] = []
        for step in level:
            for branch, then in ((step.then, True), (step.else_, False)):
                out.extend((step, a, then) for a in branch if isinstance(a, LookupSet) and a.first)
        return out

    def _join_lookups(self, level: tuple[Step, ...]) -> None:
        """LEFT JOIN each lookup of the level on the trimmed value its match field starts the level with.

        The joined subquery only has `_ff_lk*` columns, so the items' own column names stay unambiguous;
        its key is unique (the lookup table keeps a key's first row), so no item is repeated. A list
        `match` joins LATERAL the row of its first element (in order) that has one (P22): the
        elements are unnested in the subquery's FROM, where only the items' columns are in scope.
        """
        for _, part, _ in self._level_lookups(level):
            assert self.schema is not None, "a lookup needs the schema of the pass's table"
            key = lookup_key_column(part.tag)
            picked = [fmt("{0} AS {1}", _col(KEY), _col(key))]
            picked.extend(
                _as(_col(column_for_field(c)), lookup_value_column(part.tag, j)) for j, c in enumerate(part.columns)
            )
            if part.match in self.plan.lists:
                # Each element probes the table's index (a LATERAL subquery kept apart by OFFSET 0): joined
                # to the elements, the table was read whole once per item, hashed or scanned (the passes plan
                # without nested loops, executor._keep_order): 5,000 items and keys took 5 s, 100k minutes.
                self.relation = fmt(
                    "{0} LEFT JOIN LATERAL (SELECT _ff_l.* FROM unnest({2}) WITH ORDINALITY AS _ff_u(_ff_e, _ff_o) "
                    "CROSS JOIN LATERAL (SELECT {1} FROM {3} WHERE {4} = {5} OFFSET 0) AS _ff_l "
                    "ORDER BY _ff_u._ff_o LIMIT 1) AS {6} ON true",
                    self.relation,
                    join(picked, ", "),
                    self.base(part.match),
                    of(ident(self.schema, part.table)),
                    _col(KEY),
                    trimmed_frag(_lists.ELEMENT),
                    _col(f"_ff_lj{part.tag}"),
                )
                continue
            self.relation = fmt(
                "{0} LEFT JOIN (SELECT {1} FROM {2}) AS {3} ON {4} = {5}",
                self.relation,
                join(picked, ", "),
                of(ident(self.schema, part.table)),
                _col(f"_ff_lj{part.tag}"),
                _col(key),
                _col(lookup_match_column(part.tag)),
            )

    def _lookup_reports(self, level: tuple[Step, ...]) -> list[tuple[str, Frag]]:
        """Each lookup of the level: whether it matched, on the items it ran on (else NULL), and the trimmed
        value it did not match (else NULL). A matched item's value is never read: left NULL, it is not
        written into every item of the pass table (a category path: ~5% of a catalog's row)."""
        out: list[tuple[str, Frag]] = []
        for step, part, then in self._level_lookups(level):
            value_col, matched_col = (c for c, _ in lookup_report_columns(part.tag))
            if part.match in self.plan.lists:
                # a list is reported as its text, the elements joined with "," (P23)
                value = trimmed_frag(_lists.as_text(self.base(part.match)))
            else:
                value = _col(lookup_match_column(part.tag))
            missed = fmt("{0} IS NULL", _col(lookup_key_column(part.tag)))
            matched = fmt("({0} IS NOT NULL)", _col(lookup_key_column(part.tag)))
            if step.rule.when is not None:
                flag = _col(flag_column(step.rule))
                ran = flag if then else fmt("NOT {0}", flag)
                out.append((value_col, fmt("CASE WHEN {0} AND {1} THEN {2} END", ran, missed, value)))
                out.append((matched_col, fmt("CASE WHEN {0} THEN {1} END", ran, matched)))
            elif then:
                out.append((value_col, fmt("CASE WHEN {0} THEN {1} END", missed, value)))
                out.append((matched_col, matched))
            else:  # the else branch of a rule without `when`: it never runs
                out.append((value_col, raw("NULL::text")))
                out.append((matched_col, raw("NULL::boolean")))
        return out

    def _exclusion(self) -> Frag | None:
        """The WHERE that drops the rows the pass's (first) excluding rule excludes."""
        rule = self.plan.excluding
        if rule is None:
            return None
        drop_then, drop_else = branch_excludes(rule.then), branch_excludes(rule.else_)
        if rule.when is None:
            return raw("false") if drop_then else None
        if drop_then and drop_else:
            return raw("false")
        flag = _col(flag_column(rule))
        return fmt("NOT {0}", flag) if drop_then else flag

    def build(self) -> Frag:
        """The SELECT feeding the pass table: ord, key, src, fields_out columns, flag columns."""
        last = len(self.plan.levels) - 1
        for i, level in enumerate(self.plan.levels):
            self._start_numbers(i)
            self._start_flags(level)
            self._start_lookup_keys(level)
            self._flush()  # the values read the level's flags, number texts and lookup keys
            self._join_lookups(level)
            values = self._values(level)
            where = self._exclusion() if i == 0 else None
            reports = self._lookup_reports(level)
            if i == last:
                items = [_col(ORD), _col(KEY), _col(SRC)]
                for name in self.plan.fields_out:
                    col = column_for_field(name)
                    items.append(_as(values[name], col) if name in values else _col(col))
                items.extend(_col(c) for c in self.carried if c not in self.number_until and c not in self.hidden)
                if self.report_cols:
                    mine = dict(reports)
                    items.extend(
                        _as(mine[c], c) if c in mine else _col(c)
                        for c, _ in self.plan.extra()[len(self.plan.flagged) :]
                        if c != GROUP_TEXT_COLUMN
                    )
                group = self.plan.keys_group
                if group is not None:  # not written by this level (_plan._group_keys): its value is a column
                    items.append(_as(self.group_text_of(self.base(group), group), GROUP_TEXT_COLUMN))
                return self._select(items, where, barrier=False)
            layer = self.pending = _Layer(values, [n for n in values if n not in self.fields], where=where)
            layer.extra.extend(reports)
            layer.drop.update(self.level_keys)
            self.level_keys = []
            self._end_numbers(i, level, layer)
        raise AssertionError("a pass has at least one level")


def _group_join(items: Frag, groups: Frag, key: Frag) -> Frag:
    """`items` (aliased t) each joined to its group's row of `groups` by group value `key` (P18: a blank
    value is a group of its own, keyed by the item's position)."""
    return fmt(
        '{0} LEFT JOIN {1} AS "_ff_gj" ON "_ff_gk" = {2} AND "_ff_gk2" = CASE WHEN {2} = \'\' THEN t.{3} ELSE -1 END',
        items,
        groups,
        key,
        _col(ORD),
    )


def lookup_match_column(tag: str) -> str:
    """The column holding the trimmed value lookup action `tag` matches (`_Builder._start_lookup_keys`)."""
    return f"_ff_lq{tag}"


def first_of_group_in(table: sql.Composable, group: Frag) -> Frag:
    """The item is the first of its group among `table`'s items: one grouped scan, hashed (P19)."""
    g = trimmed_frag(group)
    return fmt(
        "({0} IN (SELECT min({0}) FROM {1} GROUP BY {2}, CASE WHEN {2} = '' THEN {0} ELSE -1 END))",
        _col(ORD),
        of(table),
        g,
    )


def _aggregate_frag(a: Aggregate, lists: ListFields = NO_LISTS) -> Frag:
    """An aggregate over the members' `of` values (`_ff_gv<tag>`, numbers for min/max/sum), as text (P16).

    Over a list field's elements (`Aggregate.over_list`) a member's value is already its own
    part: its elements joined (join), their min/max/sum, or its list's text form (first/last,
    cast back to the list here).
    """
    v, o = _col(f"_ff_gv{a.tag}"), raw('"_ff_go"')
    if a.op == "count":
        return raw("count(*)::text")
    if a.op in ("first", "last"):
        picked = fmt("(array_agg({0} ORDER BY {1}" + (")" if a.op == "first" else " DESC)") + ")[1]", v, o)
        return fmt("({0})::text[]", picked) if a.keeps_list(lists) else picked
    if a.op == "join":
        return fmt(
            "left(coalesce(string_agg({0}, {1} ORDER BY {2}) FILTER (WHERE {0} <> ''), ''), {3})",
            v, val(a.separator, "text"), o, raw(str(JOIN_MAX_CHARS)),
        )  # fmt: skip
    # min/max/sum: numbers as the number ops read them; written as math writes them, with `round`
    # decimals or as many as the most precise input (items without a number are skipped; none: "")
    scale = _col(f"_ff_gs{a.tag}") if a.over_list(lists) else fmt("scale({0})", v)
    places = val(a.round, "integer") if a.round is not None else fmt("max({0})", scale)
    return fmt("coalesce(round(" + a.op + "({0}), {1})::text, '')", v, places)


def trimmed_frag(value: Frag) -> Frag:
    """`value` with Unicode white space trimmed (as a key is, 8.3); btrim only when an end is white."""
    ws = val(WHITESPACE, "text")
    return fmt(
        "(CASE WHEN strpos({1}, left({0}, 1)) > 0 OR strpos({1}, right({0}, 1)) > 0 THEN btrim({0}, {1}) ELSE {0} END)",
        value,
        ws,
    )


def pass_select(
    plan: PassPlan,
    source: sql.Composable,
    lo: int | None = None,
    hi: int | None = None,
    *,
    groups: sql.Composable | None = None,
    pages: bool = False,
) -> Frag:
    """The pass's SELECT over the rows of `source` with _ff_ord in [lo, hi] (all when both are None;
    with `pages`, the rows on heap pages [lo, hi)).

    `groups`: for a grouped pass, the table `groups_select` filled from the whole pass input;
    without it the pass aggregates `source` itself, which is only right when `source` is all of it.
    """
    return _Builder(plan, source, _cut(lo, hi, pages), groups).build()


def groups_select(plan: PassPlan, sources: Sequence[sql.Composable]) -> Frag:
    """A grouped pass's groups (P16-P19) over its whole input, held by `sources` one after the other.

    Made once per pass into a table the pass's parts join (`pass_select(groups=...)`): a
    group's members may sit in any part, and each part aggregating all of them would repeat
    the work once per part.
    """
    assert plan.grouped and sources
    builder = _Builder(plan, sources[0], None)
    if len(sources) == 1:
        return builder.group_rows(of(sources[0]))
    parts = join((fmt("SELECT * FROM {0}", of(s)) for s in sources), " UNION ALL ")
    return builder.group_rows(fmt("({0}) AS s", parts))


def pass_insert(
    plan: PassPlan, source: sql.Composable, target: sql.Composable, lo: int | None = None, hi: int | None = None
) -> Frag:
    """The pass statement. With flagged rules it returns one row: rows written, then each
    flagged rule's matches among them; without, it returns nothing (use the row count)."""
    flags = [flag_column(r) for r in plan.flagged]
    extra = [c for c, _ in plan.extra()]
    columns = join([_col(c) for c in (ORD, KEY, SRC, *plan.columns(), *extra)], ", ")
    insert = fmt("INSERT INTO {0} ({1}) {2}", of(target), columns, pass_select(plan, source, lo, hi))
    if not flags:
        return insert
    counts = join([fmt("count(*) FILTER (WHERE {0})", _col(f)) for f in flags], ", ")
    returning = join([_col(f) for f in flags], ", ")
    return fmt("WITH ins AS ({0} RETURNING {1}) SELECT count(*), {2} FROM ins", insert, returning, counts)


def count_select(
    plan: PassPlan,
    source: sql.Composable,
    lo: int | None = None,
    hi: int | None = None,
    *,
    groups: sql.Composable | None = None,
    pages: bool = False,
) -> Frag:
    """Rows of the pass input, and how many match the excluding rule's `when` (its match count)."""
    where = _cut(lo, hi, pages)
    # A grouped relation takes the cut inside, where its rows are the table's own (t.ctid).
    builder = _Builder(plan, source, where if plan.grouped else None, groups)
    rule = plan.excluding
    matched = raw("count(*)")
    if rule is not None and rule.when is not None:
        matched = fmt("count(*) FILTER (WHERE {0})", condition_frag(rule.when, builder.base, None, plan.lists))
    if plan.grouped:
        text = fmt("SELECT count(*), {0} FROM {1}", matched, builder.relation)
        where = builder.where
    else:
        text = fmt("SELECT count(*), {0} FROM {1} AS t", matched, of(source))
    return fmt("{0} WHERE {1}", text, where) if where is not None else text


def deletes_only(plan: PassPlan) -> bool:
    """A pass of one excluding rule that changes no field and reads no group (its DELETE could not see
    the groups): it can drop rows in place instead of copying them."""
    return len(plan.rules) == 1 and only_excludes(plan.rules[0])


def exclusion_delete(plan: PassPlan, target: sql.Composable) -> Frag:
    """`DELETE FROM target WHERE <the pass's excluding rule drops the row>` for a `deletes_only` pass.

    The kept rows are exactly those the copying pass's WHERE lets through; a NULL
    there drops the row in both forms (`IS NOT TRUE`).
    """
    rule = plan.excluding
    assert rule is not None and deletes_only(plan)
    builder = _Builder(plan, target, None)
    drop_then, drop_else = branch_excludes(rule.then), branch_excludes(rule.else_)
    if rule.when is None:
        keep = raw("false") if drop_then else raw("true")
    elif drop_then and drop_else:
        keep = raw("false")
    else:
        when = condition_frag(rule.when, builder.base, None, plan.lists)
        keep = fmt("NOT ({0})", when) if drop_then else when
    return fmt("DELETE FROM {0} AS t WHERE ({1}) IS NOT TRUE", of(target), keep)
