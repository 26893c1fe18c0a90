"""What each rule does to the sample: the run's own rules SQL, one rule per pass, states compared.

A real run packs rules into few passes (rules/_plan.py). A preview wants to see
between any two rules, so it plans each enabled rule as a pass of its own with
the same planner and runs it with the same executor (`run_pass_chunk`), which
also returns the rule's match count exactly as a run's report counts it.
Rules are order-dependent and a pass sees what the previous one wrote, so the
states in between are the ones a run goes through. Which items a rule matched
comes from the rule's compiled condition (`condition_sql`) over the rule's
input: no second evaluator anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.preview.deadline import Deadline
from firefeed.rules.executor import plan_passes, prepare_pass, run_pass_chunk
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.model import Rule
from firefeed.rules.sqlgen import condition_sql
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService

#: an item's values by field name (a list field's: its elements), and its key and origin source
Row = tuple[str, int, dict[str, Any]]


@dataclass
class RuleEffect:
    """One enabled rule over the sample: counts, and per item (by position) what it did."""

    rule: Rule
    items_in: int
    matched_count: int  # as the executor counts it for a run's report
    matched: dict[int, bool] = field(default_factory=dict)  # position -> the `when` held
    changes: dict[int, list[tuple[str, Any, Any]]] = field(default_factory=dict)  # position -> (field, before, after)
    excluded: set[int] = field(default_factory=set)


@dataclass
class Effects:
    start: dict[int, Row]  # the merged sample, position -> (key, source index, values)
    rules: list[RuleEffect]
    fields: list[str]  # input fields, then those rules created
    table: str = ""  # the table holding the state after the last rule


def _read(engine: Engine, area: str, table: str, fields: Sequence[str], lists: ListFields) -> dict[int, Row]:
    """The table's items by position; a list field's value is a list of its elements, or the text it
    holds (an array from 0, SPEC 9 P2), as json shows it."""
    cols = [ident(column_for_field(f)) for f in fields]
    kinds = [sql.SQL("array_lower({}, 1) = 0").format(c) for f, c in zip(fields, cols, strict=True) if f in lists]
    statement = sql.SQL("SELECT {}, {}, {}{} FROM {} ORDER BY 1").format(
        ident(ORD),
        ident(KEY),
        ident(SRC),
        sql.SQL("").join(sql.SQL(", ") + c for c in [*cols, *kinds]),
        ident(company_schema(area), table),
    )
    out: dict[int, Row] = {}
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(statement)
        for r in cur.fetchall():
            values = dict(zip(fields, r[3 : 3 + len(cols)], strict=True))
            texts = iter(r[3 + len(cols) :])
            for f in fields:
                if f in lists and next(texts):
                    values[f] = values[f][0]
            out[int(r[0])] = (r[1], int(r[2]), values)
    return out


def _matches(engine: Engine, area: str, table: str, fields: Sequence[str], rule: Rule) -> dict[int, bool]:
    """Per position: does the rule's `when`, compiled as a run compiles it, hold on `table`'s rows."""
    if rule.when is None:
        return {}
    known = set(fields)
    params: list[object] = []

    def column(name: str) -> sql.Composable:
        if name in known:
            return ident(column_for_field(name))
        return sql.SQL("'{}'::text[]") if name in rule.lists else sql.SQL("''::text")

    # group_first: the groups of the rule's input, as its pass reads them (P16)
    cond = condition_sql(rule.when, column, params, rule.lists, ident(company_schema(area), table))
    statement = sql.SQL("SELECT {}, {} FROM {}").format(ident(ORD), cond, ident(company_schema(area), table))
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(statement, params)
        return {int(r[0]): bool(r[1]) for r in cur.fetchall()}


def rule_effects(
    engine: Engine,
    schema: SchemaService,
    *,
    area: str,
    preview_id: str,
    table: str,
    fields: Sequence[str],
    rules: Sequence[Rule],
    deadline: Deadline | None = None,
) -> Effects:
    """Run the enabled `rules` on `table` of the scratch `area`, one pass each, and diff the states.

    `deadline` is checked before each rule (and names the rule running when time is up).
    """
    current = list(dict.fromkeys(fields))
    lists = rules[0].lists if rules else NO_LISTS  # every rule carries the same list fields
    before = _read(engine, area, table, current, lists)
    effects = Effects(start=before, rules=[], fields=current)
    src = table
    for rule in rules:
        if not rule.enabled:
            continue
        if deadline is not None:
            deadline.check(f"running rule {rule.name!r}")
        plans = plan_passes([rule], current)
        assert len(plans) == 1, "one rule is one pass"
        # Pass numbers name the pass tables: number them by rule so every state stays readable.
        plan = replace(plans[0], number=rule.index)
        matched = _matches(engine, area, src, current, rule)
        dst = prepare_pass(schema, company=area, run_id=preview_id, plan=plan)
        with raw_connection(engine) as conn:
            counts = run_pass_chunk(conn, plan, src, dst, company=area, rows_in=len(before))
        current = list(plan.fields_out)
        after = _read(engine, area, dst, current, lists)
        effect = RuleEffect(rule=rule, items_in=len(before), matched_count=counts.matched[rule.name])
        for pos, (_key, _src, values) in before.items():
            effect.matched[pos] = matched.get(pos, True)
            if pos not in after:
                effect.excluded.add(pos)
                continue
            new = after[pos][2]
            missing: dict[str, Any] = {f: [] if f in rule.lists else "" for f in current if f not in values}
            changed = [
                (f, values.get(f, missing.get(f)), new[f]) for f in current if new[f] != values.get(f, missing.get(f))
            ]
            if changed:
                effect.changes[pos] = changed
        effects.rules.append(effect)
        before, src = after, dst
    effects.fields = current
    effects.table = src
    return effects
