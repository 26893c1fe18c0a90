"""The rule language compiled to SQL: conditions, and the one statement a pass runs.

A pass is `INSERT INTO dst SELECT ... FROM (levels...) FROM src`. Each level is
two nested subqueries kept apart by `OFFSET 0` (so Postgres does not fold
them together and compute an expression once per use):

    F: SELECT <every column>, <when of each rule starting here> AS _ff_m<i> FROM (previous) OFFSET 0
    V: SELECT <every column, CASE WHEN _ff_m<i> THEN <then> ELSE <else> END for changed ones>
       FROM (F) [WHERE <the excluding rule lets the row through>] OFFSET 0

A level may start with one more subquery, H, computing the text of a field's
first number (the costly regex of number reading) once as a column `_ff_n<k>`
when several conditions or actions of the pass read that same value, or a math
action reads it (it needs the matched text three times). Such a column rides
along until its field is written or it has no more readers; it is never
written to the pass table.

The flags are written to the pass table too, so the statement's RETURNING
counts the matches without a second scan. Identifiers only come from
firefeed.schema.identifiers.ident; every value is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg2 import sql

from firefeed.rules._actions_sql import action_frag
from firefeed.rules._conditions_sql import condition_frag, number_text_frag
from firefeed.rules._frag import Frag, fmt, join, of, raw, val
from firefeed.rules._plan import PassPlan, Step, flag_column
from firefeed.rules.model import AllOf, AnyOf, Condition, FieldAction, Leaf, Math, Not, branch_excludes
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, ident


def condition_sql(cond: Condition, column: Callable[[str], sql.Composable], params: list[Any]) -> sql.Composable:
    """A boolean SQL expression for `cond` that is never NULL.

    `column(field)` returns the SQL of a field's current value (a quoted column,
    or ''::text when the table lacks it); literal values are appended to
    `params`, in the order of their `%s` placeholders.
    """
    frag = condition_frag(cond, lambda name: of(column(name)))
    params.extend(frag.params)
    return frag.sql


_NUMBER_OPS = ("gt", "gte", "lt", "lte")


def _number_leaf_fields(cond: Condition) -> list[str]:
    """The fields whose number the condition reads, once per reading leaf."""
    if isinstance(cond, Leaf):
        return [cond.field] if cond.op in _NUMBER_OPS else []
    if isinstance(cond, Not):
        return _number_leaf_fields(cond.item)
    assert isinstance(cond, AllOf | AnyOf)
    return [f for c in cond.items for f in _number_leaf_fields(c)]


def _number_reads(step: Step) -> list[tuple[str, bool]]:
    """(field, by a math action that always runs) for each reading of a level-start value's number."""
    reads: list[tuple[str, bool]] = []
    if step.first and step.rule.when is not None:
        reads.extend((f, False) for f in _number_leaf_fields(step.rule.when))
    for chain in (step.then, step.else_):
        written: set[str] = set()
        for action in chain:
            no_op = isinstance(action, Math) and action.op == "divide" and action.value.is_zero()
            if isinstance(action, Math) and action.field not in written and not no_op:
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


class _Builder:
    """Walks a pass's levels, stacking subqueries over the source table."""

    def __init__(self, plan: PassPlan, source: sql.Composable, where: Frag | None) -> None:
        self.plan = plan
        self.fields = list(plan.fields_in)  # fields that are columns of the current relation
        self.flags: list[str] = []
        self.relation = fmt("{0} AS t", of(source))
        self.where = where  # applies to the first subquery that reads the table
        self.numbers: dict[str, str] = {}  # field -> column holding the text of its current value's first number
        self._plan_numbers()

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
        self.number_until: dict[tuple[str, int], int] = {}  # (field, first level) -> last reading level
        for (name, _), uses in reads.items():
            if len(uses) >= 2 or any(always for _, always in uses):
                first = uses[0][0]
                self.number_at.setdefault(first, []).append(name)
                self.number_until[(name, first)] = uses[-1][0]
        self._number_since: dict[str, int] = {}

    def number_text(self, name: str) -> Frag | None:
        return _col(self.numbers[name]) if name in self.numbers else None

    def base(self, name: str) -> Frag:
        return _col(column_for_field(name)) if name in self.fields else raw("''::text")

    def _passthrough(
        self, values: dict[str, Frag] | None = None, order: list[str] | None = None, numbers: bool = True
    ) -> list[Frag]:
        values = values or {}
        items = [_col(ORD), _col(KEY), _col(SRC)]
        for name in order or self.fields:
            col = column_for_field(name)
            items.append(_as(values[name], col) if name in values else _col(col))
        items.extend(_col(f) for f in self.flags)
        if numbers:
            items.extend(_col(c) for c in self.numbers.values())
        return items

    def _start_numbers(self, i: int) -> None:
        """The H subquery of level i: the number texts first read at this level."""
        names = self.number_at.get(i, [])
        if not names:
            return
        items = self._passthrough()
        for name in names:
            col = f"_ff_n{len(self._number_since) + 1}"
            items.append(_as(number_text_frag(self.base(name)), col))
            self.numbers[name] = col
            self._number_since[col] = i
        self._nest(self._select(items, None, barrier=True))

    def _end_numbers(self, i: int, level: tuple[Step, ...]) -> None:
        """After level i's values: drop number columns of rewritten fields and of values nobody reads again."""
        written = {n for step in level for n in step.writes}
        for name, col in list(self.numbers.items()):
            if name in written or self.number_until[(name, self._number_since[col])] <= i:
                del self.numbers[name]

    def _select(self, items: list[Frag], where: Frag | None, barrier: bool) -> Frag:
        conds = [w for w in (self.where, where) if w is not None]
        self.where = None
        text = fmt("SELECT {0} FROM {1}", join(items, ", "), self.relation)
        if conds:
            text = fmt("{0} WHERE {1}", text, join(conds, " AND "))
        return fmt("{0} OFFSET 0", text) if barrier else text

    def _nest(self, query: Frag) -> None:
        self.relation = fmt("({0}) AS t", query)

    def _chain(self, actions: tuple[FieldAction, ...]) -> dict[str, Frag]:
        current: dict[str, Frag] = {}
        for action in actions:
            current[action.field] = action_frag(
                action,
                lambda n: current[n] if n in current else self.base(n),
                lambda n: None if n in current else self.number_text(n),
            )
        return current

    def _values(self, level: tuple[Step, ...]) -> dict[str, Frag]:
        values: dict[str, Frag] = {}
        for step in level:
            then, else_ = self._chain(step.then), self._chain(step.else_)
            for name in step.writes:
                yes, no = then.get(name, self.base(name)), else_.get(name, self.base(name))
                if step.rule.when is None:
                    values[name] = yes
                else:
                    values[name] = fmt("CASE WHEN {0} THEN {1} ELSE {2} END", _col(flag_column(step.rule)), yes, no)
        return values

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
            starting = [s.rule for s in level if s.first and s.rule.when is not None]
            if starting:
                items = self._passthrough()
                for rule in starting:
                    assert rule.when is not None
                    items.append(_as(condition_frag(rule.when, self.base, self.number_text), flag_column(rule)))
                self._nest(self._select(items, None, barrier=True))
                self.flags.extend(flag_column(r) for r in starting)
            values = self._values(level)
            new = [n for n in values if n not in self.fields]
            where = self._exclusion() if i == 0 else None
            if i == last:
                self.fields.extend(new)
                items = self._passthrough(values, list(self.plan.fields_out), numbers=False)
                return self._select(items, where, barrier=False)
            self._end_numbers(i, level)
            query = self._select(self._passthrough(values, self.fields + new), where, barrier=True)
            self.fields.extend(new)
            self._nest(query)
        raise AssertionError("a pass has at least one level")


def pass_select(plan: PassPlan, source: sql.Composable, lo: int | None = None, hi: int | None = None) -> Frag:
    return _Builder(plan, source, chunk_filter(lo, hi)).build()


def pass_insert(
    plan: PassPlan, source: sql.Composable, target: sql.Composable, lo: int | None = None, hi: int | None = None
) -> Frag:
    """The pass statement. With flagged rules it returns one row: rows written, then each
    flagged rule's matches among them; without, it returns nothing (use the row count)."""
    flags = [flag_column(r) for r in plan.flagged]
    columns = join([_col(c) for c in (ORD, KEY, SRC, *plan.columns(), *flags)], ", ")
    insert = fmt("INSERT INTO {0} ({1}) {2}", of(target), columns, pass_select(plan, source, lo, hi))
    if not flags:
        return insert
    counts = join([fmt("count(*) FILTER (WHERE {0})", _col(f)) for f in flags], ", ")
    returning = join([_col(f) for f in flags], ", ")
    return fmt("WITH ins AS ({0} RETURNING {1}) SELECT count(*), {2} FROM ins", insert, returning, counts)


def count_select(plan: PassPlan, source: sql.Composable, lo: int | None = None, hi: int | None = None) -> Frag:
    """Rows of the pass input, and how many match the excluding rule's `when` (its match count)."""
    builder = _Builder(plan, source, None)
    rule = plan.excluding
    matched = raw("count(*)")
    if rule is not None and rule.when is not None:
        matched = fmt("count(*) FILTER (WHERE {0})", condition_frag(rule.when, builder.base))
    text = fmt("SELECT count(*), {0} FROM {1} AS t", matched, of(source))
    where = chunk_filter(lo, hi)
    return fmt("{0} WHERE {1}", text, where) if where is not None else text
