"""What each lookup action found: the `rules.lookups` report of a run (P23).

A pass writes, per lookup action, the value it matched and whether it found a row
(`_plan.lookup_report_columns`); the reports are read from those columns once the pass ran
(`lookup_counts`), or from the pass's counts alone when nothing was left unmatched
(`lookup_counts_known`). A lookup in a branch that excludes leaves with its items, so no pass
table holds what it found: `excluded_lookup_counts` reads it from the pass input before the pass
runs. The loop that calls these is firefeed/pipeline/rule_passes.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.rules._frag import Frag, fmt, join, of, val
from firefeed.rules._plan import PassPlan, excluded_lookups_rule, lookup_report_columns, plan_passes
from firefeed.rules.executor import ChunkCounts, make_groups
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import Rule
from firefeed.rules.sqlgen import pass_select
from firefeed.schema.identifiers import ORD, company_schema, ident
from firefeed.schema.service import SchemaService

__all__ = ["TOP_UNMATCHED", "excluded_lookup_counts", "in_action_order", "lookup_counts", "lookup_counts_known"]

#: how many unmatched values a lookup's report lists (P23)
TOP_UNMATCHED = 20


def lookup_counts(
    engine: Engine, company: str, actions: Sequence[tuple[Rule, LookupSet]], tables: Sequence[str]
) -> list[dict[str, Any]]:
    """The report of each lookup action of a pass (`PassPlan.lookups`, P23), read from the pass tables it wrote.

    Only items the action ran on have a matched flag, only unmatched ones a value; values are listed most frequent
    first, ties in feed order (the first item holding each), at most TOP_UNMATCHED.
    """
    schema = company_schema(company)
    out: list[dict[str, Any]] = []
    with raw_connection(engine) as conn, conn.cursor() as cur:
        # A scan of 1M items that JIT compiled first: 0.19 s of its 0.8 s.
        cur.execute("SET LOCAL jit = off")
        for rule, part in actions:
            sources = [Frag(ident(schema, t)) for t in tables]
            out.append(_lookup_report_of(cur, rule, part, sources))
    return out


def _lookup_report_of(cur: Any, rule: Rule, part: LookupSet, sources: Sequence[Frag]) -> dict[str, Any]:
    """One lookup action's report from its report columns in `sources` (tables or SELECTs), in feed order."""
    value, matched = (ident(c) for c, _ in lookup_report_columns(part.tag))
    rows = join(
        (
            fmt(
                "SELECT r.{0} AS v, r.{1} AS m, r.{2} AS o FROM {3} AS r WHERE r.{1} IS NOT NULL",
                of(value),
                of(matched),
                of(ident(ORD)),
                s,
            )
            for s in sources
        ),
        " UNION ALL ",
    )
    # One scan: matched items fold into one group, unmatched ones are grouped by value.
    query = fmt(
        "WITH g AS (SELECT m, CASE WHEN m THEN NULL ELSE v END AS v, count(*) AS n, min(o) AS f"
        " FROM ({0}) r GROUP BY 1, 2)"
        " SELECT true, NULL, coalesce(sum(n) FILTER (WHERE m), 0),"
        " coalesce(sum(n) FILTER (WHERE NOT m), 0), NULL FROM g"
        " UNION ALL (SELECT false, v, n, NULL, f FROM g WHERE NOT m ORDER BY n DESC, f LIMIT {1})",
        rows,
        val(TOP_UNMATCHED, "integer"),
    )
    cur.execute(query.sql, query.params)
    found = cur.fetchall()
    ((_, _, hits, misses, _),) = [r for r in found if r[0]]
    values = sorted((r for r in found if not r[0]), key=lambda r: (-r[2], r[4]))
    top = [{"value": v, "count": int(n)} for _, v, n, _, _ in values]
    return _lookup_report(rule, part, int(hits), int(misses), top)


def excluded_lookup_counts(
    schema_service: SchemaService,
    *,
    company: str,
    run_id: str,
    plan: PassPlan,
    inputs: Sequence[tuple[str, int | None, int | None]],
) -> list[dict[str, Any]]:
    """The reports of the lookups in the branches of the pass's excluding rule that exclude (P23).

    Their items leave in the pass, so no pass table holds what those lookups found: they are read,
    before the pass runs, from a SELECT of the branches (their `exclude` taken out) over the pass
    input, held by `inputs` (table, heap pages [lo, hi) or all). Empty when those branches hold none.
    """
    ran = excluded_lookups_rule(plan.excluding) if plan.excluding is not None else None
    if ran is None:
        return []
    (counted,) = plan_passes([ran], plan.fields_in)
    # Its groups table, if any, is the pass's own number; and it reads the pass's input as the pass
    # does: a grouped pass's input may hold each item's group value already (`keyed_input`), which a
    # SELECT computing it again would name twice.
    counted = dataclasses.replace(counted, number=plan.number, keyed_input=plan.keyed_input)
    schema = company_schema(company)
    groups = None
    if counted.grouped and len(inputs) > 1:
        tables = list(dict.fromkeys(t for t, _, _ in inputs))
        groups = make_groups(schema_service, company=company, run_id=run_id, plan=counted, tables=tables)
    try:
        joined = ident(schema, groups) if groups is not None else None
        sources = [
            fmt("({0})", pass_select(counted, ident(schema, t), lo, hi, groups=joined, pages=True))
            for t, lo, hi in inputs
        ]
        with raw_connection(schema_service.engine) as conn, conn.cursor() as cur:
            cur.execute("SET LOCAL jit = off")
            return [_lookup_report_of(cur, rule, part, sources) for rule, part in counted.lookups]
    finally:
        if groups is not None:
            schema_service.drop_table(company, groups)


def in_action_order(
    plan: PassPlan,
    now: Sequence[tuple[Rule, LookupSet]],
    excluded: Sequence[dict[str, Any]],
    reports: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """`reports` (of the lookups `now`) with `excluded` (those of the branches of the pass's first rule
    that exclude) among that rule's own, which lead them, in action order: `then` before `else` (P23)."""
    if not excluded:
        return list(reports)
    own = sum(1 for rule, _ in now if rule is plan.excluding)

    def place(report: dict[str, Any]) -> tuple[int, int]:
        action = str(report["action"])
        return (0 if action.startswith("then") else 1, int(action[action.index("[") + 1 : action.index("]")]))

    return sorted([*reports[:own], *excluded], key=place) + list(reports[own:])


def _lookup_report(rule: Rule, part: LookupSet, hits: int, misses: int, top: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rule": rule.name,
        "action": part.path.rsplit(".", 1)[-1],
        "lookup": part.lookup,
        "matched": hits,
        "unmatched": misses,
        "unmatched_values": top,
    }


def lookup_counts_known(
    actions: Sequence[tuple[Rule, LookupSet]],
    written: Sequence[ChunkCounts],
    deleted: Sequence[ChunkCounts] = (),
) -> list[dict[str, Any]] | None:
    """`lookup_counts` of `actions` from the parts' counts, without a scan, when every item they ran on
    found a row: there are no unmatched values to list. `written`: the counts of the parts of the pass
    that ran them; `deleted`: those of the DELETE pass since (its `deleted_lookups`). None when a part
    did not count them or an item is left unmatched: then the pass tables are read (`lookup_counts`).

    A lookup table that covers its feed (what its report asks a user for) costs its report nothing.
    """
    out: list[dict[str, Any]] = []
    for rule, part in actions:
        hits = misses = 0
        for counts, sign in [*((c.lookups, 1) for c in written), *((c.deleted_lookups, -1) for c in deleted)]:
            if counts is None or part.tag not in counts:
                return None
            hits += sign * counts[part.tag][0]
            misses += sign * counts[part.tag][1]
        if misses:
            return None
        out.append(_lookup_report(rule, part, hits, 0, []))
    return out
