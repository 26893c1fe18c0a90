"""Feed quality of one export: channel diagnostics and the run diff, computed while the file is written.

One scan of the items the export selects, hash-joined to the rows of the
export's last published file, fills the export's run table with, per item,
its key `k` and its 64-bit hash `kh` (the join hashes that: a million text
keys made the join spill to disk, 2.8 s against 1.2 s), a content hash `h`
of the values the export writes (a cheap 64-bit `hashtextextended` per output
column, XORed with the column's position as seed: concatenating the values
first cost more than hashing them), the channel check flags `f` (see
`diagnostics`), its export position `o`, its diff state `d` (`diff`) and,
only when the channel id is not the item key, that id `i` (for duplicate ids).
The findings and the diff are then read from that narrow table.

The checks are the costly part (2.3 s of CPU on 1M items for Google's, the
price and URL checks mostly), and most items of a feed are the same as last
time: an item whose content hash is its published one keeps its published
flags, and only new and changed items are checked. That holds only when the
flags were computed by the same checks over the same columns, so the run
table carries the checks' fingerprint (a table comment) and a run whose
fingerprint differs from the published one checks every item.

It all runs on its own connection, in a thread beside the COPY that writes the
file, so on a free core it adds little to the export's wall time.
`measuring()` starts it and hands back the outcome to merge into the export's
entry in the RunReport: `diagnostics` (exports with a channel) and `diff`.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg2
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane.names import export_tmp_table
from firefeed.db.engine import raw_connection
from firefeed.errors import ExportError
from firefeed.export import diff
from firefeed.export._copy import render
from firefeed.export.channel_checks import VARIANT_ATTRIBUTES, VARIANT_BIT, mark_variants, variants
from firefeed.export.channels import ERROR, WARNING, Channel, channel
from firefeed.export.diagnostics import Check, channel_checks, findings, findings_sql, flags_sql
from firefeed.export.select import OutputColumn, Piece, output_columns, sql_text, where_clause
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.schema.identifiers import KEY, ORD, company_schema, ident, published_keys_table
from firefeed.schema.service import BASELINE_TID

#: the flag bit of an item whose channel id an earlier item has (the checks take bits 0-61)
DUPLICATE_BIT = 1 << 62
#: the outcome's error mask, for `Measurement.valid_only`; not part of the RunReport
_MASK = "_error_mask"

if TYPE_CHECKING:
    from firefeed.schema.service import SchemaService
    from firefeed.spec.model import ExportSpec


@dataclass(frozen=True)
class Target:
    """Where one export of one run reads its items and keeps its diff rows."""

    company: str
    project: str
    run_id: str
    index: int
    table: str
    fields: Sequence[str]
    key_field: str
    lists: ListFields = NO_LISTS


def _is_key(export: ExportSpec, column: OutputColumn, key_field: str) -> bool:
    """True when the column is the item key itself (unique by construction: no duplicate check needed)."""
    if export.fields is None:
        return column.name == key_field
    source = export.fields.get(column.name, "")
    return isinstance(source, str) and "{" not in source and "}" not in source and source == key_field


def _hash(names: Sequence[str]) -> Piece:
    parts = [Piece(sql.SQL("hashtextextended({}, {})").format(ident(c), sql.Literal(j))) for j, c in enumerate(names)]
    total = parts[0]
    for part in parts[1:]:
        total = total + sql_text(" # ") + part
    return total


def fingerprint(ch: Channel, columns: Sequence[OutputColumn], checks: Sequence[Check], cur: Any) -> str:
    """What an item's flags depend on besides its output values: the channel, the columns, the checks' SQL."""
    # "v2": flags carry the variant and duplicate bits, rows their variant hash (#49); older tables are checked anew
    digest = hashlib.sha256(b"v2\x00" + ch.name.encode())
    for column in columns:
        digest.update(b"\x00" + column.name.encode())
    digest.update(b"\x01" + render(flags_sql(checks), cur))
    return digest.hexdigest()


def _insert(
    target: Target,
    run_table: str,
    columns: Sequence[OutputColumn],
    where: Piece,
    checks: Sequence[Check],
    id_at: int | None,
    baseline: diff.Published | None,
    reuse_flags: bool,
    structured: bool = False,
    checked_at: dict[str, int] | None = None,
    variant_at: Sequence[int] = (),
    payload: bool = False,
    baseline_tid: bool = False,
) -> Piece:
    """INSERT the run table's rows from one scan of the items joined to the published rows.

    The inner OFFSET 0 keeps each output value computed once per item, the
    outer one the content hash, which the join compares. An item whose hash
    is its published one keeps its published flags when `reuse_flags`: the
    checks run only for new and changed items. `structured`: the format writes a list's elements
    apart (json, google-xml) and json a text apart from a list, so a list column's hash reads its
    array's text form (`{"x,y"}` is not `{x,y}`, `[0:0]={x}` not `{x}`), not the joined value.
    `payload` (an export with `sync`, SPEC 10 C9): `j`, the output values as a JSON array in column
    order (a list column as an array of its elements), what the sync engine sends for the item.
    `baseline_tid`: each row's published row's TID into `BASELINE_TID` (a delta's taken-over run table, whose
    take-over then deletes those rows by TID: `schema.service._take_over`).
    """
    schema = company_schema(target.company)
    checked_at = checked_at or {}
    projected = sql_text("SELECT ") + Piece(sql.SQL("{} AS k, {} AS o").format(ident(KEY), ident(ORD)))
    hashed_names = []
    for j, column in enumerate(columns):
        projected = projected + sql_text(", ") + column.value + Piece(sql.SQL(" AS {}").format(ident(f"c{j}")))
        name = f"c{j}"
        if structured and column.elements is not None:
            name = f"s{j}"
            form = sql_text("(") + column.elements + sql_text(")::text")
            projected = projected + sql_text(", ") + form + Piece(sql.SQL(" AS {}").format(ident(name)))
        hashed_names.append(name)
    if payload:
        values = [
            sql_text(f"to_jsonb(e{j})") if c.elements is not None else sql_text(f"to_jsonb(c{j})")
            for j, c in enumerate(columns)
        ]
        for j, column in enumerate(columns):
            if column.elements is not None:
                projected = projected + sql_text(", ") + column.elements + sql_text(f" AS e{j}")
    projected = projected + Piece(sql.SQL(" FROM {}").format(ident(schema, target.table))) + where
    hashed = sql_text("SELECT k, o, hashtextextended(k, 0) AS kh, ") + _hash(hashed_names) + sql_text(" AS h")
    for j in range(len(columns)):
        hashed = hashed + sql_text(f", c{j}")
    if payload:
        array = values[0]
        for value in values[1:]:
            array = array + sql_text(", ") + value
        hashed = hashed + sql_text(", jsonb_build_array(") + array + sql_text(") AS j")
    hashed = hashed + sql_text(" FROM (") + projected + sql_text(" OFFSET 0) x OFFSET 0")
    flags = flags_sql(checks)
    if reuse_flags:
        # the duplicate-id bit is the run's own (`_mark_duplicates`): another item may hold the id now
        flags = sql_text(f"CASE WHEN p.h = s.h THEN p.f & {~DUPLICATE_BIT} ELSE ") + flags + sql_text(" END")
    names = "k, kh, h, f, o, d" + (", i" if id_at is not None else "") + ", fv, v, w" + (", j" if payload else "")
    if baseline_tid:
        assert baseline is not None
        names += f", {BASELINE_TID}"
    select = sql_text("SELECT s.k, s.kh, s.h, ") + flags + sql_text(" AS f, s.o, ") + Piece(diff.state_sql(baseline))
    select = select + sql_text(" AS d")
    if id_at is not None:
        select = select + sql_text(f", s.c{id_at} AS i")
    carried = "".join(f", s.c{j}" for j in sorted({*checked_at.values(), *variant_at}))
    select = select + sql_text(carried)
    if reuse_flags and variant_at:
        select = select + sql_text(", p.h = s.h AS pv_same, p.v AS pv")
    if payload:
        select = select + sql_text(", s.j")
    if baseline_tid:
        select = select + sql_text(f", p.ctid AS {BASELINE_TID}")
    source = sql_text(" FROM (") + hashed + sql_text(") s")
    if baseline is not None:
        source = source + Piece(
            sql.SQL(" LEFT JOIN {} p ON {}").format(ident(schema, baseline.table), diff.join_condition(baseline))
        )
    # The flags are computed once (OFFSET 0), then a flagged item's checked values are kept beside them.
    outer = "SELECT k, kh, h, f, o, d" + (", i" if id_at is not None else "")
    outer += ", " + _checked_values(checks, checked_at) + ", "
    if reuse_flags and variant_at:
        # an unchanged item (its content hash the published one's) has the published variant hash
        outer += f"CASE WHEN pv_same THEN pv ELSE {_variant_hash(variant_at)} END, CASE WHEN NOT pv_same THEN pv END"
    else:
        outer += _variant_hash(variant_at) + ", NULL::bigint"
    if payload:
        outer += ", j"
    if baseline_tid:
        outer += f", {BASELINE_TID}"
    inner = select + source + sql_text(" OFFSET 0")
    insert = Piece(sql.SQL("INSERT INTO {} (" + names + ") ").format(ident(schema, run_table)))
    return insert + sql_text(outer + " FROM (") + inner + sql_text(") q")


def _checked_values(checks: Sequence[Check], checked_at: dict[str, int]) -> str:
    """`fv`: NULL for an item no check flagged, else per check the value it read when it failed (#49)."""
    if not checks:
        return "NULL::text[]"
    cells = [
        f"CASE WHEN (f & {1 << n}) <> 0 THEN c{checked_at[c.attribute]} END" if c.attribute in checked_at else "NULL"
        for n, c in enumerate(checks)
    ]
    return f"CASE WHEN f = 0 THEN NULL ELSE ARRAY[{', '.join(cells)}]::text[] END"


def _variant_hash(variant_at: Sequence[int]) -> str:
    """`v`: a hash of item_group_id and the variant attributes, for an item with a group; else NULL.

    `variants` then compares the narrow run table's hashes (one hash aggregate) rather than every
    item's values (a window over the items: +13% on a steady google-xml export, #49).
    """
    if not variant_at:
        return "NULL::bigint"
    group, *attributes = variant_at
    values = ", ".join(f"coalesce(c{j}, '')" for j in (group, *attributes))
    return f"CASE WHEN c{group} <> '' THEN hashtextextended(concat_ws(chr(31), {values}), 0) END"


def _duplicates(cur: Any, table: sql.Composable) -> dict[str, Any] | None:
    """The duplicate-id finding: items whose id an earlier item already has, and up to 5 of those ids.

    Each such item gets `DUPLICATE_BIT` in its flags: it is an item with an error (C3's share,
    `invalid_items: exclude`) and the findings list finds it by that bit.
    """
    cur.execute(
        sql.SQL(
            "WITH first AS (SELECT i, min(o) AS o FROM {t} WHERE i <> '' GROUP BY i HAVING count(*) > 1), "
            "later AS (UPDATE {t} r SET f = r.f | {bit} FROM first WHERE r.i = first.i AND r.o > first.o "
            "RETURNING r.i, r.o) "
            "SELECT count(*), (array_agg(i ORDER BY o))[1:5] FROM later"
        ).format(t=table, bit=sql.Literal(DUPLICATE_BIT))
    )
    extra, samples = cur.fetchone()
    if not extra:
        return None
    return {
        "severity": ERROR,
        "check": "duplicate_id",
        "attribute": "id",
        "count": int(extra),
        "samples": list(dict.fromkeys(samples or [])),
        "message": "id: the same id as an earlier item",
    }


def capped_values(
    cur: Any, export: ExportSpec, columns: Sequence[OutputColumn], table: sql.Composable, where: Piece
) -> list[dict[str, Any]]:
    """google-xml's dropped list elements (P28): one warning per capped column, with items and values dropped."""
    if export.format != "google-xml":
        return []
    from firefeed.export.google_xml import CAPPED

    out: list[dict[str, Any]] = []
    for column in columns:
        cap = CAPPED.get(column.name)
        if cap is None or column.elements is None:
            continue
        n = sql_text("cardinality(") + column.elements + sql_text(")")
        counts = (
            sql_text("SELECT count(*) FILTER (WHERE ")
            + n
            + sql_text(f" > {int(cap)}), coalesce(sum(greatest(")
            + n
            + sql_text(f" - {int(cap)}, 0)), 0) FROM ")
            + Piece(table)
            + where
        )
        cur.execute(render(counts, cur))
        items, dropped = cur.fetchone()
        samples: list[str] = []
        if items:
            # the first items (in export order) that lost values, as other findings name theirs
            inner = Piece(sql.SQL("SELECT {} AS k, {} AS o, ").format(ident(KEY), ident(ORD))) + n
            inner = inner + sql_text(" AS n FROM ") + Piece(table) + where
            first = sql_text("SELECT k FROM (") + inner + sql_text(f") x WHERE n > {int(cap)} ORDER BY o LIMIT 3")
            cur.execute(render(first, cur))
            samples = [str(r[0]) for r in cur.fetchall()]
        if items:
            out.append(
                {
                    "check": f"{column.name}_cap",
                    "severity": WARNING,
                    "count": int(items),
                    "dropped": int(dropped),
                    "samples": samples,
                    "message": f"{column.name}: Google takes at most {cap} values; "
                    f"{int(dropped)} values of {int(items)} items were left out",
                }
            )
    return out


def summary(found: Sequence[dict[str, Any]], ch: Channel | None) -> dict[str, Any]:
    """The export's `diagnostics`: its channel, how many findings of each severity, and the findings."""
    return {
        "channel": ch.name if ch is not None else None,
        "errors": sum(1 for f in found if f["severity"] == ERROR),
        "warnings": sum(1 for f in found if f["severity"] == WARNING),
        "findings": list(found),
    }


def label(run_id: str, checks: Sequence[Check]) -> str:
    """What the run table's flag bits mean, after its fingerprint in its comment (`findings_list` reads it)."""
    doc = {
        "run": run_id,
        "checks": [
            {"check": c.code, "attribute": c.attribute, "severity": c.severity, "message": c.message} for c in checks
        ],
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def error_mask(checks: Sequence[Check]) -> int:
    """The flag bits of the checks whose findings are errors, and the duplicate id's: an item with any is invalid."""
    mask = DUPLICATE_BIT
    for n, check in enumerate(checks):
        if check.severity == ERROR:
            mask |= 1 << n
    return mask


@dataclass(frozen=True)
class Plan:
    """What one export's run table is computed from: its columns and filter, the channel's checks, and
    where in the columns the channel id (when it is not the key) and the variant attributes are."""

    columns: list[OutputColumn]
    where: Piece
    ch: Channel | None
    checks: list[Check]
    id_at: int | None
    variant_at: list[int]
    checked_at: dict[str, int]
    structured: bool


def plan(target: Target, export: ExportSpec) -> Plan:
    """The export's `Plan`, as `measure` and a delta run's patch (`patch`) both read it."""
    columns = output_columns(target.fields, export, target.lists)
    where = where_clause(target.fields, export, target.lists, ident(company_schema(target.company), target.table))
    projected = [OutputColumn(c.name, Piece(ident(f"c{j}"))) for j, c in enumerate(columns)]
    ch = channel(export.resolved_channel) if export.resolved_channel else None
    checks = channel_checks(ch, projected) if ch else []
    id_at = next((j for j, c in enumerate(columns) if ch and c.name == ch.id_attribute), None)
    if id_at is not None and _is_key(export, columns[id_at], target.key_field):
        id_at = None
    at = {c.name: j for j, c in enumerate(columns)}
    variant_at = (
        [at["item_group_id"], *(at[a] for a in VARIANT_ATTRIBUTES if a in at)] if ch and "item_group_id" in at else []
    )
    checked_at = {c.attribute: at[c.attribute] for c in checks if c.attribute in at}
    structured = export.format in ("json", "jsonl", "google-xml")
    return Plan(list(columns), where, ch, list(checks), id_at, variant_at, checked_at, structured)


def scan_settings(cur: Any) -> None:
    """The transaction's settings for filling a run table (`measure`, and a delta's patch): no parallel
    workers, room for the published rows' hash, no JIT (thirty-odd hashes an item: compiling them took
    about 0.2 s of a 1.4 s scan of 1M items and saved nothing)."""
    cur.execute("SET LOCAL max_parallel_workers_per_gather = 0")
    cur.execute("SET LOCAL work_mem = '128MB'")
    cur.execute("SET LOCAL jit = off")


def measure(engine: Engine, schema: SchemaService, target: Target, export: ExportSpec) -> dict[str, Any]:
    """Fill the export's run table and return its `diagnostics` (None without a channel) and `diff`.

    `diagnostics.invalid` counts the items with at least one error finding (SPEC 10 C3), of
    `diagnostics.items`; `error_mask` the flag bits that make an item invalid (`invalid_items: exclude`).
    """
    p = plan(target, export)
    columns, where, ch, checks, id_at, variant_at = p.columns, p.where, p.ch, p.checks, p.id_at, p.variant_at
    company = company_schema(target.company)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        checked = fingerprint(ch, columns, checks, cur) if ch is not None and checks else None
        baseline = diff.published(cur, company, published_keys_table(target.project, export.name))
        conn.commit()
        run_table = schema.create_export_tmp(
            target.company,
            target.run_id,
            target.index,
            with_id=id_at is not None,
            checks=f"{checked} {label(target.run_id, checks)}" if checked is not None else None,
            conn=conn,
            with_payload=export.sync is not None,
        )
        table = ident(company, run_table)
        reuse = checked is not None and baseline is not None and baseline.checks == checked
        scan_settings(cur)
        # A hash join of the scan against the published rows, which are hashed in memory (~70 MB for 1M items).
        cur.execute("SET LOCAL enable_mergejoin = off")
        cur.execute("SET LOCAL enable_nestloop = off")
        statement = _insert(
            target,
            run_table,
            columns,
            where,
            checks,
            id_at,
            baseline,
            reuse,
            p.structured,
            p.checked_at,
            variant_at,
            payload=export.sync is not None,
        )
        cur.execute(render(statement, cur))
        rows = int(cur.rowcount)
        changes = diff.compare(cur, company, run_table, baseline, rows)
        diagnostics = None
        if variant_at:
            kept = ident(company, baseline.table) if reuse and baseline is not None else None
            touched = bool(changes["added"] or changes["changed"] or changes["removed"])
            mark_variants(cur, table, kept, touched=touched, removed=bool(changes["removed"]))
        if ch is not None:
            diagnostics = diagnose(cur, table, p, rows)
        if export.sync is not None and export.invalid_items == "exclude" and ch is not None:
            # The items the file leaves out (C3) are not sent either: no payload, so the sync plans none.
            cur.execute(
                sql.SQL("UPDATE {} SET j = NULL WHERE (f & {}) <> 0").format(table, sql.Literal(error_mask(checks)))
            )
        capped = capped_values(cur, export, columns, ident(company, target.table), where)
        if capped:
            diagnostics = (diagnostics or {}) | summary([*(diagnostics or {}).get("findings", []), *capped], ch)
    return {"diagnostics": diagnostics, "diff": changes, _MASK: error_mask(checks) if ch is not None else 0}


def diagnose(cur: Any, table: sql.Composable, p: Plan, rows: int) -> dict[str, Any]:
    """The `diagnostics` of an export with a channel, read from its filled run table `table` of `rows` items."""
    assert p.ch is not None
    dup = _duplicates(cur, table) if p.id_at is not None else None
    # The sample of an item is its channel id when that is not the key (and not empty).
    sample = sql.SQL("CASE WHEN i <> '' THEN i ELSE k END") if p.id_at is not None else sql.Identifier("k")
    cur.execute(render(findings_sql(p.checks, table, sample, error_mask(p.checks), (VARIANT_BIT,)), cur))
    row = cur.fetchone()
    invalid = int(row[-1] or 0)
    found = list(findings(p.checks, row))
    if dup is not None:
        found.append(dup)
    same = variants(p.columns, int(row[-3] or 0), row[-2])
    if same is not None:
        found.append(same)
    return summary(found, p.ch) | {"items": rows, "invalid": invalid}


class Measurement:
    """`measure` running in a thread (or done at once, `first`); `result()` waits for it."""

    def __init__(
        self, engine: Engine, schema: SchemaService, target: Target, export: ExportSpec, *, first: bool = False
    ) -> None:
        self._export = export
        self._outcome: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if first:
            self._run(engine, schema, target, export)
            return
        context = contextvars.copy_context()  # log lines of the thread keep the run id
        self._thread = threading.Thread(
            target=context.run, args=(self._run, engine, schema, target, export), name="export-quality", daemon=True
        )
        self._thread.start()

    def _run(self, engine: Engine, schema: SchemaService, target: Target, export: ExportSpec) -> None:
        try:
            self._outcome = measure(engine, schema, target, export)
        except BaseException as exc:  # re-raised by result() in the caller's thread
            self._error = exc

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def valid_only(self, target: Target) -> Piece:
        """A condition on the export's items that leaves out those with an error finding (`invalid_items: exclude`).

        Needs the run table filled, so the measurement must have run `first`. An anti-join with
        the flagged rows only: `_ff_key` is the items' key (the run table's is `k`).
        """
        self.result()  # raises the measurement's error
        assert self._outcome is not None
        outcome = self._outcome
        table = ident(company_schema(target.company), export_tmp_table(target.run_id, target.index))
        return Piece(
            sql.SQL("NOT EXISTS (SELECT 1 FROM {} r WHERE r.k = {} AND (r.f & {}) <> 0)").format(
                table, ident(KEY), sql.Literal(int(outcome[_MASK]))
            )
        )

    def excluded(self) -> int:
        """How many items `valid_only` leaves out: those with an error finding."""
        diagnostics = self.result().get("diagnostics") or {}
        return int(diagnostics.get("invalid") or 0)

    def result(self) -> dict[str, Any]:
        self.join()
        if self._error is not None:
            if isinstance(self._error, psycopg2.Error):
                message = (self._error.pgerror or str(self._error)).strip()
                raise ExportError(self._export.name, f"checking the items failed: {message}") from self._error
            raise self._error
        assert self._outcome is not None
        return {k: v for k, v in self._outcome.items() if k != _MASK}


@contextmanager
def measuring(
    engine: Engine, schema: SchemaService, target: Target, export: ExportSpec, *, first: bool = False
) -> Iterator[Measurement]:
    """Measure the export while the caller writes it; the thread is always joined before leaving.

    `first`: measure it now, before the caller writes (a few items: on the one connection the
    caller then takes from the pool, instead of a second one opened beside it).
    """
    job = Measurement(engine, schema, target, export, first=first)
    try:
        yield job
    finally:
        job.join()
