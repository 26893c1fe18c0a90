"""The items behind an export's channel findings (#49): what `firefeed findings` and the findings route list.

A run's report names each finding with a count and five samples; a merchant
fixing a feed needs every item, the attribute and the value the channel would
reject. Those are in the export's run table (`quality`), which outlives the
run in one of two names: the published table of the last file that went out,
or, after a run blocked in EXPORT (drop guard, max_invalid, fail_on), the
checked table of that run, which a later publish drops. The blocked run's
table is read first when there is one: its findings are the ones that stopped
the feed, while the live file is older.

Per item the table holds the flags `f` (bit n: check n failed), the values
those checks read `fv` (`fv[n+1]`), and, for the two findings that compare
items with each other, the channel id `i` (`duplicate_id`: an id an earlier
item has, marked by a flag bit of its own) and a variant hash `v` (`variants`:
the values of an earlier item of the same group). What each bit means is the table's comment (`checks
<fingerprint> <json>`), so the list reads the table alone, never the spec's
checks of today, which may differ from the ones that flagged the items.

A list is one page of a bounded read: a read-only transaction, a statement
timeout, LIMIT/OFFSET over the flagged rows in export order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.errors
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.config import get_settings
from firefeed.db.engine import raw_connection
from firefeed.errors import NotFoundError, SpecError, ValuesTimeoutError
from firefeed.export.channel_checks import VARIANT_BIT
from firefeed.export.channels import CHECKS, ERROR, WARNING
from firefeed.export.quality import DUPLICATE_BIT
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import checked_keys_table, company_schema, ident, published_keys_table

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
PUBLISHED, BLOCKED = "published", "blocked"
#: the sort rank of the findings that compare items (after every flag bit: a bigint holds at most 63)
_DUPLICATE_ID, _VARIANTS = 100, 101
#: a table renamed or dropped by a publish between finding and reading it: look again, this many times
_ATTEMPTS = 3


@dataclass(frozen=True)
class FindingItem:
    """One item behind one finding: the item (its channel id, else its key) and what the check saw."""

    key: str
    check: str
    attribute: str
    severity: str
    value: str | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "check": self.check,
            "attribute": self.attribute,
            "severity": self.severity,
            "value": self.value,
            "message": self.message,
        }


@dataclass(frozen=True)
class FindingsPage:
    """One page of an export's finding items; `reason` says why there is nothing to read (else None)."""

    export: str
    run_id: str | None
    source: str | None
    total: int
    offset: int
    limit: int
    items: list[FindingItem] = field(default_factory=list)
    reason: str | None = None

    @property
    def next_offset(self) -> int | None:
        after = self.offset + len(self.items)
        return after if after < self.total else None

    def to_json(self) -> dict[str, Any]:
        return {
            "export": self.export,
            "run_id": self.run_id,
            "source": self.source,
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "next_offset": self.next_offset,
            "items": [i.to_json() for i in self.items],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class _Bit:
    check: str
    attribute: str
    severity: str
    message: str


@dataclass(frozen=True)
class _Table:
    """A findings table as found: its name, which columns it has, and what its flag bits mean."""

    name: str
    source: str
    run_id: str | None
    bits: list[_Bit] | None
    has_id: bool
    has_values: bool
    has_variants: bool


def check_paging(check: str | None, offset: int, limit: int) -> None:
    """Refuse a check name no channel has, and a page outside the bounds, naming what is allowed."""
    if check is not None and check not in CHECKS:
        raise SpecError("check", f"unknown check {check!r}: the checks are {', '.join(CHECKS)}")
    if offset < 0:
        raise SpecError("offset", f"offset {offset} is negative")
    if not 1 <= limit <= MAX_LIMIT:
        raise SpecError("limit", f"limit {limit} is not between 1 and {MAX_LIMIT}")


def channel_exports(engine: Engine, project: str, *, company: str | None = None) -> list[str]:
    """The project's exports that have a channel, in spec order: the ones with findings to list."""
    store = RunStore(engine)
    store.project(project, company=company)
    spec, _ = store.project_spec(project)
    return [e.name for e in spec.exports if e.resolved_channel is not None]


def list_findings(
    engine: Engine,
    project: str,
    export: str,
    *,
    company: str | None = None,
    check: str | None = None,
    offset: int = 0,
    limit: int = DEFAULT_LIMIT,
) -> FindingsPage:
    """One page of the items behind `export`'s findings (of `check` only, when given), in export order.

    NotFoundError: no such project (of `company`) or export; SpecError: an unknown check or a page out of
    bounds; ValuesTimeoutError: the read took longer than FIREFEED_VALUES_DEADLINE_S.
    """
    check_paging(check, offset, limit)
    store = RunStore(engine)
    row = store.project(project, company=company)
    spec, _ = store.project_spec(project)
    entry = next((e for e in spec.exports if e.name == export), None)
    if entry is None:
        raise NotFoundError(f"project {project!r} has no export {export!r}")
    empty = FindingsPage(export, None, None, 0, offset, limit)
    if entry.resolved_channel is None:
        return _with_reason(empty, f"export {export!r} has no channel: its items are not checked")
    schema = company_schema(row.company_id)
    names = ((checked_keys_table(project, export), BLOCKED), (published_keys_table(project, export), PUBLISHED))
    for attempt in range(_ATTEMPTS):
        try:
            return _read(engine, schema, names, export, check, offset, limit)
        except psycopg2.errors.UndefinedTable:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _with_reason(page: FindingsPage, reason: str) -> FindingsPage:
    return FindingsPage(page.export, page.run_id, page.source, 0, page.offset, page.limit, [], reason)


def _read(
    engine: Engine,
    schema: str,
    names: Sequence[tuple[str, str]],
    export: str,
    check: str | None,
    offset: int,
    limit: int,
) -> FindingsPage:
    timeout_s = get_settings().values_deadline_s
    empty = FindingsPage(export, None, None, 0, offset, limit)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        # One page for a person or a script, never a long scan holding a connection of the API.
        cur.execute("SET LOCAL statement_timeout = %s", (f"{max(1, round(timeout_s * 1000))}ms",))
        table = _find(cur, schema, names)
        if table is None:
            return _with_reason(empty, f"export {export!r} has not been published or checked yet: run the project")
        found = FindingsPage(export, table.run_id, table.source, 0, offset, limit)
        if table.bits is None:
            return _with_reason(found, "its findings were not kept (a run of an earlier release): run the project")
        query = _union(ident(schema, table.name), table, check)
        if query is None:
            return found
        try:
            # The page and the total in one pass over the rows; only a page past the end counts again.
            cur.execute(
                sql.SQL("SELECT key, n, value, count(*) OVER () FROM ({}) u ORDER BY o, n LIMIT %s OFFSET %s").format(
                    query[0]
                ),
                (*query[1], limit, offset),
            )
            rows = cur.fetchall()
            items = [_item(table.bits, str(key), int(n), value) for key, n, value, _ in rows]
            if rows:
                total = int(rows[0][3])
            else:
                cur.execute(sql.SQL("SELECT count(*) FROM ({}) u").format(query[0]), query[1])
                total = int(cur.fetchone()[0])
        except psycopg2.errors.QueryCanceled as err:
            raise ValuesTimeoutError(
                f"listing the findings of export {export!r} took longer than "
                f"FIREFEED_VALUES_DEADLINE_S={timeout_s:g} s: ask for one check (--check) or a smaller page"
            ) from err
    return FindingsPage(export, table.run_id, table.source, total, offset, limit, items)


def _find(cur: Any, schema: str, names: Sequence[tuple[str, str]]) -> _Table | None:
    """The first of `names` that exists, with its columns and the meaning of its bits (its comment)."""
    for name, source in names:
        cur.execute(
            "SELECT c.oid IS NOT NULL, obj_description(c.oid, 'pg_class'),"
            " ARRAY(SELECT a.attname::text FROM pg_attribute a"
            "   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)"
            " FROM (SELECT to_regclass(%s) AS oid) c",
            (sql.Identifier(schema, name).as_string(cur),),
        )
        exists, comment, columns = cur.fetchone()
        if not exists:
            continue
        run_id, bits = _label(comment)
        return _Table(
            name=name,
            source=source,
            run_id=run_id,
            bits=bits,
            has_id="i" in columns,
            has_values="fv" in columns,
            has_variants="v" in columns,
        )
    return None


def _label(comment: str | None) -> tuple[str | None, list[_Bit] | None]:
    """The run and the checks of each flag bit from a table comment `checks <fingerprint> <json>`.

    A table without the JSON (an earlier release's) yields no bits: its flags cannot be told apart.
    """
    if not isinstance(comment, str) or not comment.startswith("checks "):
        return None, None
    parts = comment[len("checks ") :].split(" ", 1)
    if len(parts) < 2:
        return None, None
    try:
        label = json.loads(parts[1])
    except ValueError:
        return None, None
    bits = [
        _Bit(str(c["check"]), str(c["attribute"]), str(c["severity"]), str(c["message"]))
        for c in label.get("checks") or []
    ]
    run = label.get("run")
    return (str(run) if run is not None else None), bits


def _union(table: sql.Composable, found: _Table, check: str | None) -> tuple[sql.Composable, tuple[Any, ...]] | None:
    """The rows (key, o, n, value) of every finding item, of `check` only when given; None: there can be none.

    `n` is the flag bit, or `_DUPLICATE_ID` / `_VARIANTS`: the page sorts on (o, n), the export's order,
    then the report's order of the findings.
    """
    assert found.bits is not None
    key = sql.SQL("CASE WHEN t.i <> '' THEN t.i ELSE t.k END" if found.has_id else "t.k")
    parts: list[sql.Composable] = []
    params: list[Any] = []
    wanted = [n for n, bit in enumerate(found.bits) if check is None or bit.check == check]
    if wanted:
        mask = 0
        for n in wanted:
            mask |= 1 << n
        value = sql.SQL("t.fv[b.n + 1]" if found.has_values else "NULL::text")
        # The mask first: only rows with one of the wanted bits set are unnested, usually a few.
        parts.append(
            sql.SQL(
                "SELECT {key} AS key, t.o, b.n, {value} AS value FROM {t} t CROSS JOIN unnest(%s::int[]) AS b(n)"
                " WHERE t.f & %s::bigint <> 0 AND t.f & (1::bigint << b.n) <> 0"
            ).format(key=key, value=value, t=table)
        )
        params += [wanted, mask]
    if found.has_id and check in (None, "duplicate_id"):
        # EXPORT marks an item whose id an earlier item has with a bit of its own (`quality.DUPLICATE_BIT`).
        parts.append(
            sql.SQL("SELECT t.i AS key, t.o, {n} AS n, t.i AS value FROM {t} t WHERE t.f & {bit} <> 0").format(
                n=sql.Literal(_DUPLICATE_ID), t=table, bit=sql.Literal(DUPLICATE_BIT)
            )
        )
    if found.has_variants and check in (None, "variants"):
        # The bit EXPORT sets on each later item of a repeated group and variant values (`mark_variants`).
        parts.append(
            sql.SQL("SELECT {key} AS key, t.o, {n} AS n, NULL::text AS value FROM {t} t WHERE t.f & {bit} <> 0").format(
                n=sql.Literal(_VARIANTS), key=key, t=table, bit=sql.Literal(VARIANT_BIT)
            )
        )
    if not parts:
        return None
    return sql.SQL(" UNION ALL ").join(parts), tuple(params)


def _item(bits: Sequence[_Bit], key: str, n: int, value: str | None) -> FindingItem:
    if n == _DUPLICATE_ID:
        return FindingItem(key, "duplicate_id", "id", ERROR, value, "id: the same id as an earlier item")
    if n == _VARIANTS:
        message = "item_group_id: the same variant attributes as an earlier item of its group"
        return FindingItem(key, "variants", "item_group_id", WARNING, value, message)
    bit = bits[n]
    message = bit.message if bit.message.startswith(f"{bit.attribute}: ") else f"{bit.attribute}: {bit.message}"
    return FindingItem(key, bit.check, bit.attribute, bit.severity, value, message)
