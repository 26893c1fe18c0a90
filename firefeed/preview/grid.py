"""The preview as a grid (#53): each sample item's cells after the rules, what set each cell, and the rows
each export would write.

The page shows the sample as a table whose changed cells are marked and whose every cell says on hover
which source or rule set it. That is computed from what the preview already has: the merged sample and
each rule's changes (preview/effects.py), and each source's sample rows as its reader passed them on
(merged as MERGE merges them: a later source's non-empty value of a field it contributes overwrites).
An export's rows are read with the export's own SQL (its columns, `where` and list fields: export/select.py)
from the scratch table holding the sample after the rules, so the row shown is the row a run would write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.export.channels import channel
from firefeed.export.diagnostics import Check, channel_checks
from firefeed.export.select import OutputColumn, output_columns, where_clause
from firefeed.preview.cache import SourceRows
from firefeed.preview.effects import Effects
from firefeed.preview.models import Cell, OutputExcluded, OutputRow
from firefeed.rules.lists import ListFields
from firefeed.schema.identifiers import KEY, ORD, company_schema, ident
from firefeed.spec.model import ExportSpec

#: what `origin` says of a cell a source set, and of one a rule set
SOURCE, RULE = "source:", "rule:"


@dataclass(frozen=True)
class Cells:
    values: list[Cell]
    origin: list[str]
    changed: list[int]


class SourceCells:
    """Which source last brought a non-empty value of each field of each sample key, as MERGE merges them."""

    def __init__(self, names: Sequence[str], rows: Sequence[SourceRows], contrib: Sequence[Sequence[str]]) -> None:
        self.names = list(names)
        # per source: key -> its row as the source brought it ({field: value}), and the fields it contributes
        self._by_key: list[dict[str, dict[str, str]]] = []
        self._contrib = [frozenset(c) for c in contrib]
        #: the fields some source brings (the others only a rule can set)
        self._brought: set[str] = set()
        for kept in rows:
            self._brought.update(kept.fields)
            by_key: dict[str, dict[str, str]] = {}
            for key, (_line, values) in zip(kept.keys, kept.rows, strict=True):
                by_key[key] = {f: values[i] if i < len(values) else "" for i, f in enumerate(kept.fields)}
            self._by_key.append(by_key)

    def origin(self, key: str, field: str, brought_by: int) -> str:
        """The source whose value of `field` the merged item holds (the one that brought the item when none
        of the others has a non-empty one); "" for a field no source has."""
        if field not in self._brought:
            return ""
        found = brought_by
        for j, by_key in enumerate(self._by_key):
            if field not in self._contrib[j] or j == brought_by:
                continue
            value = by_key.get(key, {}).get(field)
            if value is not None and value.strip() != "" and value != "{}" and j > brought_by:
                found = j
        return SOURCE + self.names[found]

    def brought(self, key: str) -> list[tuple[str, list[str], list[str]]]:
        """(source name, fields, values) of each source that has the key: the item as each source brought it."""
        out = []
        for name, by_key in zip(self.names, self._by_key, strict=True):
            row = by_key.get(key)
            if row is not None:
                out.append((name, list(row), list(row.values())))
        return out


def _empty(field: str, lists: ListFields) -> Cell:
    return [] if field in lists else ""


def item_cells(effects: Effects, lists: ListFields, sources: SourceCells | None) -> dict[int, Cells]:
    """Per sample position: its values after every rule that reached it, their origins and the changed cells.

    `sources` None (an export's own rules, whose input is already the project's result): a cell no rule of
    these changed says `source:` of nothing, ""; callers give the project's origins instead.
    """
    out: dict[int, Cells] = {}
    fields = effects.fields
    for pos, (key, src, start) in effects.start.items():
        values: dict[str, Any] = dict(start)
        origin = {f: sources.origin(key, f, src) if sources is not None else "" for f in fields}
        changed: set[str] = set()
        for e in effects.rules:
            if pos not in e.matched:
                break
            for f, _before, after in e.changes.get(pos, []):
                values[f] = after
                origin[f] = RULE + e.rule.name
                changed.add(f)
            if pos in e.excluded:
                break
        out[pos] = Cells(
            values=[_cell(values.get(f, _empty(f, lists))) for f in fields],
            origin=[origin.get(f, "") for f in fields],
            changed=[i for i, f in enumerate(fields) if f in changed],
        )
    return out


def _cell(value: Any) -> Cell:
    if isinstance(value, list):
        return [str(v) for v in value]
    return "" if value is None else str(value)


def excluded_by(effects: Effects) -> dict[int, str]:
    """Position -> the rule that excluded the item."""
    out: dict[int, str] = {}
    for e in effects.rules:
        for pos in e.excluded:
            out.setdefault(pos, e.rule.name)
    return out


@dataclass
class Output:
    columns: list[str]
    rows: list[OutputRow]
    excluded: list[OutputExcluded]
    #: per written row's key, the export's channel checks that fail on it (only when asked for)
    findings: dict[str, list[dict[str, str]]] | None = None
    #: the rows the export would write for the sample; `rows` holds the first of them the read budget allowed
    total: int = 0


@dataclass
class ReadBudget:
    """Characters of export rows a preview may still read, shared by its exports.

    A preview's answer is cut at FIREFEED_PREVIEW_MAX_ANSWER_BYTES, so rows past that are never shown; reading
    them anyway would hold sample items x exports x row width in the API's memory (64 exports of 1,000 wide
    items) before the cut.
    """

    left: int


#: Rows read at a time while the budget lasts.
_BATCH = 50


def export_output(
    engine: Engine,
    *,
    area: str,
    export: ExportSpec,
    effects: Effects,
    keys: dict[int, str],
    excluded: dict[int, str],
    checks: bool = False,
    budget: ReadBudget | None = None,
) -> Output:
    """The rows `export` would write for the sample: its columns over `effects.table` (the sample after the
    project's rules, and the export's own when it has some), in feed order, and the items it leaves out.

    `checks`: also each row's findings, the export's channel checks (export/diagnostics.py) on the values
    it would write (the checks of one item alone: not `variants`, which compares items of a group).
    `budget`: rows are read until it is spent (their count is `total` all the same).
    """
    fields = effects.fields
    lists = export.list_fields
    table = ident(company_schema(area), effects.table)
    columns = output_columns(fields, export, lists)
    cells = [c.elements if c.elements is not None else c.value for c in columns]
    found = _checks(export, columns) if checks else []
    cells += [c.condition for c in found]
    where = where_clause(fields, export, lists, table)
    params = [v for p in cells for v in p.params]
    parts = [p.text for p in cells]
    every = sql.SQL("SELECT {}, {} FROM {}").format(ident(ORD), ident(KEY), table)
    kept_statement = sql.SQL("SELECT {} FROM {}").format(ident(ORD), table) + where.text
    wide = sql.SQL("SELECT {}, {}{} FROM {} WHERE {} > %s AND {} = ANY(%s) ORDER BY 1 LIMIT {}").format(
        ident(ORD),
        ident(KEY),
        sql.SQL("").join(sql.SQL(", ") + t for t in parts),
        table,
        ident(ORD),
        ident(ORD),
        sql.Literal(_BATCH),
    )
    out = Output(columns=[c.name for c in columns], rows=[], excluded=[], findings={} if checks else None)
    width = 2 + len(columns)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(every)
        present = {int(r[0]): str(r[1]) for r in cur.fetchall()}
        cur.execute(kept_statement, list(where.params))
        passing = sorted(int(r[0]) for r in cur.fetchall())
        out.total = len(passing)
        last, spent = -1, False
        while not spent:
            cur.execute(wide, [*params, last, passing])
            batch = cur.fetchall()
            for r in batch:
                if budget is not None and budget.left <= 0:
                    spent = True
                    break
                row = OutputRow(key=str(r[1]), cells=[_cell(v) for v in r[2:width]])
                out.rows.append(row)
                if budget is not None:
                    budget.left -= _chars(row)
                if out.findings is not None:
                    out.findings[row.key] = [
                        {
                            "check": c.code,
                            "attribute": c.attribute,
                            "severity": c.severity,
                            "message": f"{c.attribute}: {c.message}",
                        }
                        for c, failed in zip(found, r[width:], strict=True)
                        if failed
                    ]
            if len(batch) < _BATCH:
                break
            last = int(batch[-1][0])
        # (the batch is fetched whole: at most _BATCH rows past the budget are held until this returns)
    kept = set(passing)
    left_out = {pos: OutputExcluded(key=key, by="where") for pos, key in present.items() if pos not in kept}
    for pos, key in keys.items():
        if pos not in present:
            left_out[pos] = OutputExcluded(key=key, by=excluded.get(pos, ""))
    out.excluded = [left_out[pos] for pos in sorted(left_out)]
    return out


def _chars(row: OutputRow) -> int:
    """The row's characters: never more than its JSON's bytes, so a budget spent in them is spent in bytes."""
    return len(row.key) + sum(len(c) if isinstance(c, str) else sum(map(len, c)) for c in row.cells)


def _checks(export: ExportSpec, columns: Sequence[OutputColumn]) -> list[Check]:
    """The export's channel checks on its columns (none without a channel)."""
    name = export.resolved_channel
    return channel_checks(channel(name), columns) if name is not None else []
