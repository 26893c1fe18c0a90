"""RULES around rule_passes.py: whether the project's result is read once, and an export's own rules
(P29), run at EXPORT on its copy of the items."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from firefeed.dataplane.passes import channel_first_pass
from firefeed.pipeline.context import RunContext
from firefeed.runs.contract import RulesResult
from firefeed.schema.identifiers import company_schema
from firefeed.spec.model import ProjectSpec


def read_once(spec: ProjectSpec) -> bool:
    """Whether the project's rules' result is read once, by a pass that copies it: the spec's lone export
    has rules of its own (their first pass copies whatever it reads), so nothing else reads the result."""
    return len(spec.exports) == 1 and any(r.enabled for r in spec.exports[0].parsed_rules)


def channel_rules(
    ctx: RunContext, index: int, table: str, fields: Sequence[str], rows: int | None = None
) -> RulesResult:
    """An export's own rules (P29) on its copy of the items: new pass tables read from the project's result,
    which the other exports read unchanged. In one piece when the spec has several exports (their jobs
    already run side by side); a lone export's rules run in halves like the project's, reading the
    project's two halves when its result is their view (`InProcessPasses.segments`)."""
    from firefeed.export import reads_rows, view_reads_in_order
    from firefeed.pipeline.rule_passes import run_rules
    from firefeed.rules.executor import copy_as_lists

    exp = ctx.spec.exports[index]
    schema = company_schema(ctx.spec.company)
    first_pass = channel_first_pass(index)
    # Fields the export's rules make lists that the project's leave as text: its copy holds them as lists.
    into_lists = [f for f in fields if f in exp.list_fields and f not in ctx.spec.list_fields]
    if into_lists:
        table = copy_as_lists(
            ctx.data.engine,
            ctx.data.schema,
            company=ctx.spec.company,
            run_id=ctx.run_id,
            number=first_pass - 1,
            src_table=table,
            fields=fields,
            into_lists=into_lists,
        )
    holds_rows = ctx.data.views.holds_rows(ctx.spec.company, table)
    return run_rules(
        ctx.data.engine,
        ctx.data.schema,
        company=ctx.spec.company,
        run_id=ctx.run_id,
        source_table=table,
        fields=fields,
        rules=exp.parsed_rules,
        cancel_check=ctx.check_cancel,
        # With several exports, their jobs already run side by side; a lone export's rules use both halves.
        split_min_rows=None if len(ctx.spec.exports) == 1 else 2**62,
        rows=rows,
        first_pass=first_pass,
        path=f"exports[{index}].rules",
        # Read whole by the file and the diagnostics, once each: a last pass counting nothing is a view
        # (no second write of every item), unless it joins groups of its own (see apply_passes). What it
        # reads may itself be computed (the project's last pass viewed, joining its groups) when the file
        # would still read it in order, hashing the groups: else its rows are written.
        view_last=reads_rows(exp) and (holds_rows or view_reads_in_order(ctx.data.engine, schema, table)),
        view_groups=False,
    )


def channel_report(result: RulesResult) -> dict[str, Any]:
    """`exports[i].rules` (P29): the export's own rules' passes, matches, exclusions and lookups."""
    # Pairs, as RulesResult stores them: JSONB would reorder an object's keys (the report turns them back).
    matched = [[name, n] for name, n in result.matched.items()]
    doc: dict[str, Any] = {"passes": result.passes, "matched": matched, "excluded": result.excluded}
    if result.lookups:
        doc["lookups"] = result.lookups
    return doc
