"""A delta run's export (#52): the last published file with the changed items' lines replaced.

A delta run (pipeline/delta.py) changes some items' values and nothing else: no item is added,
removed or moved. A csv, tsv or jsonl file is a header and then one line per item in `_ff_ord`
order, so the new file is the last one with the changed items' lines replaced, when:

- the format writes one line per item (csv, tsv, jsonl; json and google-xml are written whole),
  uncompressed, with no channel rules of its own and without `invalid_items: exclude` (`static_reason`);
- the export's published keys table (the diff's baseline) is the last file's items, with their
  positions `o`: its channel checks are this run's (an unchanged item keeps its flags), and it has
  no variants (judged over all items at once, from the published variant hashes);
- every changed item is in the new export exactly when it was in the last one, at the same position
  (its `where` or the rules' exclusion did not change with it);
- the last file holds the header, then exactly one line per item of the baseline (no value holds
  a newline: a quoted one would make more lines), and so do the changed items' new lines.

Anything else raises `NotPatched` with the reason, and the export is written in full as in any
run. The run table (diff and checks) is what a full EXPORT builds: the changed items' rows computed
by the same statement (`quality._insert`) restricted to them, the others the baseline's rows
(state unchanged), so the diff, the findings and the next run's baseline are a full run's.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import hashlib
import itertools
import mmap
import os
import queue
import threading
from array import array
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg2
from psycopg2 import sql

from firefeed.db.binary import network_ints
from firefeed.db.engine import raw_connection
from firefeed.errors import ExportError
from firefeed.export import diff
from firefeed.export._atomic import OutputLimitError, Writeback, open_over
from firefeed.export._copy import _begin_read, _ready, render
from firefeed.export.bounds import WriteBounds, check_free_space, too_large
from firefeed.export.line_index import LineIndex
from firefeed.export.quality import (
    Plan,
    Target,
    _insert,
    diagnose,
    fingerprint,
    label,
    plan,
    scan_settings,
)
from firefeed.export.select import Piece, sql_text
from firefeed.export.writer import _rendering
from firefeed.schema.identifiers import KEY, ORD, company_schema, ident, published_keys_table
from firefeed.schema.service import BASELINE_TID, TAKE_OVER, unchanged_values

if TYPE_CHECKING:
    from firefeed.schema.service import SchemaService
    from firefeed.spec.model import ExportSpec

T = TypeVar("T")

#: the formats whose files are a head and one line per item
LINE_FORMATS = ("csv", "tsv", "jsonl")
#: the last file is read, and the new one written, in blocks of this size (cut at a line's end)
_BLOCK = 4 << 20
_LF = ord("\n")


class NotPatched(Exception):
    """The export cannot be patched: it is written in full (the message says why)."""


def static_reason(export: ExportSpec) -> str | None:
    """Why the export's spec alone rules a patch out; None when it does not."""
    if export.format not in LINE_FORMATS:
        return f"{export.format} is written whole"
    if export.gzip:
        return "gzip"
    if export.rules is not None:
        return "the export has rules of its own"
    if export.invalid_items == "exclude" and export.resolved_channel is not None:
        return "invalid_items: exclude"
    return None


@dataclass(frozen=True)
class Changed:
    """The changed items' rows in this run's run table, and where their lines are in the last file."""

    run_table: str
    baseline: diff.Published
    plan: Plan
    #: the positions (`_ff_ord`) of the changed items the export selects now, ascending
    ords: list[int]
    #: the run table's columns, in order (the baseline's are the same)
    names: list[str]
    #: an item whose content hash is its published one keeps its published flags (the same checks)
    reuse: bool


def changed_rows(
    engine: Any, schema: SchemaService, target: Target, export: ExportSpec, last_file: str | None
) -> Changed:
    """Create the export's (empty) run table, which `complete` fills as a full run would; NotPatched when the
    baseline cannot stand for the last file's other items. `find_places` then checks that no changed item
    enters, leaves or moves.

    `last_file`: the sha256 of the file live now (the last succeeded run's). The baseline must be tagged with
    it: a publish whose baseline could not be kept (its promote failed) leaves an older one, whose positions
    may be another file's; patching by them would replace the wrong items' lines."""
    ruled = replace(target, table=ruled_table_of(target))
    p = plan(ruled, export)
    if p.variant_at:
        raise NotPatched("variants are compared over all items")
    company = company_schema(target.company)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        checked = fingerprint(p.ch, p.columns, p.checks, cur) if p.ch is not None and p.checks else None
        baseline = diff.published(cur, company, published_keys_table(target.project, export.name))
        if baseline is None or not baseline.has_key_hash:
            raise NotPatched("no published keys of the last file with their positions")
        if last_file is None or baseline.file != last_file:
            raise NotPatched("the published keys are not known to be the last file's")
        if checked is not None and baseline.checks != checked:
            raise NotPatched("the channel checks are not the last file's")
        conn.commit()
        run_table = schema.create_export_tmp(
            target.company,
            target.run_id,
            target.index,
            with_id=p.id_at is not None,
            checks=f"{checked} {label(target.run_id, p.checks)}" if checked is not None else None,
            conn=conn,
            with_payload=export.sync is not None,
            # Taken over at the promote (`complete`), unless the duplicate ids make it whole here.
            with_baseline_tid=p.id_at is None,
        )
        names = [n for n in schema.table_columns(target.company, run_table, conn=conn) if n != BASELINE_TID]
        if names != schema.table_columns(target.company, baseline.table, conn=conn):
            raise NotPatched("the published keys have other columns than this run's")
        scan_settings(cur)
        # The changed items the export selects now, by position (their rows go to the run table beside the file).
        ords = (
            sql_text("SELECT ")
            + Piece(sql.SQL("{} FROM {}").format(ident(ORD), ident(company, ruled.table)))
            + p.where
            + Piece(sql.SQL(" ORDER BY {}").format(ident(ORD)))
        )
        cur.execute(render(ords, cur))
        found = [int(r[0]) for r in cur.fetchall()]
    return Changed(run_table, baseline, p, found, names, checked is not None)


def find_places(engine: Any, target: Target, changed: Changed) -> tuple[list[int], int]:
    """The changed items' places among the last file's items (0 = the first line after the head, ascending)
    and how many items it holds; NotPatched when a changed item the export selects is not in the last file
    (`_places`; one that left it is `complete`'s)."""
    company = company_schema(target.company)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        scan_settings(cur)
        return _places(cur, ident(company, changed.baseline.table), changed.ords)


def _places(cur: Any, old: sql.Composable, ords: list[int]) -> tuple[list[int], int]:
    """Where the items at positions `ords` (ascending) are among the last file's items, and how many it holds.

    One scan of the baseline's positions, no sort: `width_bucket` puts each row after the last of `ords`
    not past its position (a binary search), so an item's place is the count of the rows in the buckets
    before its own. NotPatched unless each bucket starts with its item: every changed item the export
    selects now is in the last file (none entered it). That none left it is `complete`'s count (the
    baseline's changed rows are exactly these); testing the keys here cost as much as the rest of the scan.
    """
    if not ords:
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(old))
        return [], int(cur.fetchone()[0])
    # The positions as one text value: a bound list is an ARRAY[...] of 80k constants for the parser.
    cur.execute(
        sql.SQL("SELECT width_bucket(o, %s::bigint[]) AS b, count(*), min(o) FROM {} GROUP BY 1").format(old),
        ("{" + ",".join(map(str, ords)) + "}",),
    )
    counts = [0] * (len(ords) + 1)
    found = 0
    for bucket, n, first in cur.fetchall():
        counts[bucket] = int(n)
        if bucket and first != ords[bucket - 1]:
            raise NotPatched("a changed item enters or leaves the export")
        found += 1 if bucket else 0
    if found != len(ords):
        raise NotPatched("a changed item enters or leaves the export")
    places, before = [], 0
    for n in counts[:-1]:
        before += n
        places.append(before)
    return places, before + counts[-1]


def drop_run_table(engine: Any, company: str, run_table: str) -> None:
    """Forget a patch's run table (the full export that follows makes its own)."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(company_schema(company), run_table)))


def complete(
    engine: Any, target: Target, export: ExportSpec, changed: Changed, *, count_left: bool = True
) -> dict[str, Any]:
    """The run table's rows, then the export's `diagnostics` and `diff`, as a full run's; NotPatched when the
    baseline holds a changed item the export no longer selects (it left the export). Without `count_left`
    the caller checks that by the baseline's positions (`left_the_export`) instead of a count of its rows.

    The run table holds the changed items' rows as a full run computes them, and stands for the baseline less
    their rows with them (the others unchanged): the diff and the findings read the two parts, and the promote
    changes the baseline in place by it (`SchemaService.promote_export_keys`; `take_over`'s docstring) instead
    of the baseline's ~1M other rows copied here (1M: ~0.8 s beside the file). When that cannot stand (`why`),
    the others are copied beside, as before, on a second connection (each INSERT commits its own rows; a
    failed patch drops the table), and the EXPORT detail says why (`written`)."""
    company = company_schema(target.company)
    run = ident(company, changed.run_table)
    ruled = replace(target, table=ruled_table_of(target))
    p = changed.plan
    # The duplicate ids are flagged by an UPDATE over all the run table's rows (`quality._duplicates`).
    why = "the duplicate ids are flagged over all rows" if p.id_at is not None else None
    keys = keys_table_of(target)
    others: Beside | None = None
    if why:
        others = Beside(lambda: _copy_unchanged(engine, company, changed, keys))
    elif count_left:
        # Beside the changed rows' INSERT, where the copy ran: the baseline's rows of changed keys counted, when
        # some changed item is not selected now (it may have left the export).
        others = Beside(lambda: _changed_in_baseline(engine, company, changed, keys))
    try:
        with raw_connection(engine) as conn, conn.cursor() as cur:
            scan_settings(cur)
            # A hash of the changed rows probed by the baseline's scan: the planner, without statistics on the
            # run tables, sorted the whole baseline for a merge join (1M: 1.0 s, of it 0.6 s the sort; 0.84 s).
            cur.execute("SET LOCAL enable_mergejoin = off")
            # The changed items' rows as a full run computes them, joined to their published rows.
            statement = _insert(
                ruled,
                changed.run_table,
                p.columns,
                p.where,
                p.checks,
                p.id_at,
                changed.baseline,
                changed.reuse,
                p.structured,
                p.checked_at,
                (),
                payload=export.sync is not None,
                baseline_tid=why is None,
            )
            cur.execute(render(statement, cur))
            inserted = int(cur.rowcount)
    except BaseException:
        if others is not None:
            with contextlib.suppress(BaseException):  # the first error is the one to report
                others.result()
        raise
    if why is None:
        return _taken_over(engine, company, changed, inserted, others.result() if others is not None else None)
    assert others is not None
    copied = others.result()
    rows = inserted + copied
    with raw_connection(engine) as conn, conn.cursor() as cur:
        scan_settings(cur)
        changes = diff.compare(cur, company, changed.run_table, changed.baseline, rows)
        # The baseline's rows of changed items are exactly those `find_places` found at their positions: no
        # changed item left the export (one it does not select now would be one more).
        if int(changes["previous"]) - copied != len(changed.ords):
            raise NotPatched("a changed item enters or leaves the export")
        diagnostics = diagnose(cur, run, changed.plan, rows) if changed.plan.ch is not None else None
    return {"diagnostics": diagnostics, "diff": changes, "written": f"patched, the run table copied: {why}"}


#: the session's view of the whole run table a taken-over one stands for (the findings read it)
_WHOLE = "ff_patch_whole"


def _changed_in_baseline(engine: Any, company: str, changed: Changed, keys_table: str) -> int | None:
    """How many of the baseline's rows have a changed key (by their key hash: a hash shared by another key only
    adds to the count, which must be the selected changed items'); None, scanning nothing, when every changed
    item is selected now (each of them has exactly one baseline row, which `_taken_over` checks)."""
    keys = ident(company, keys_table)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        scan_settings(cur)
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(keys))
        if int(cur.fetchone()[0]) == len(changed.ords):
            return None
        cur.execute(
            sql.SQL(
                "SELECT count(*) FROM {old} b WHERE b.kh IN (SELECT hashtextextended(c.{key}, 0) FROM {keys} c)"
            ).format(old=ident(company, changed.baseline.table), keys=keys, key=ident(KEY))
        )
        return int(cur.fetchone()[0])


def _taken_over(engine: Any, company: str, changed: Changed, inserted: int, in_baseline: int | None) -> dict[str, Any]:
    """The diff and the findings of the baseline less the changed items' rows with the run table's (which holds
    only theirs), and the run table marked to be taken over at the promote; NotPatched unless the baseline's
    rows of changed items are exactly those the run table replaces.

    The proof: each selected changed item (one of `find_places`' positions) has a published row (none added);
    when the changed keys are no more than those items, no other baseline row has a changed key (the delta's
    `RULED` keys are among `KEYS`, and the keys are unique); else the baseline's rows of changed keys, counted
    beside (`in_baseline`), must be exactly as many as they are."""
    run, old = ident(company, changed.run_table), ident(company, changed.baseline.table)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        scan_settings(cur)
        cur.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE d = {a}), count(*) FILTER (WHERE d = {c}),"
                " count(*) FILTER (WHERE d = {u}), (SELECT count(*) FROM {old}) FROM {run}"
            ).format(
                a=sql.Literal(diff.ADDED), c=sql.Literal(diff.CHANGED), u=sql.Literal(diff.UNCHANGED), old=old, run=run
            )
        )
        added, changed_n, unchanged_n, previous = (int(v) for v in cur.fetchone())
        if added or inserted != len(changed.ords) or (in_baseline is not None and in_baseline != inserted):
            raise NotPatched("a changed item enters or leaves the export")
        rows = previous  # the others (previous less the changed) and the changed
        unchanged = unchanged_n + previous - inserted
        changes = {
            "baseline": True,
            "previous": previous,
            "rows": rows,
            "added": 0,
            "removed": previous - changed_n - unchanged,
            "changed": changed_n,
            "unchanged": unchanged,
            "samples": {
                "added": [],
                "removed": [],
                "changed": diff._first(cur, run, diff.CHANGED) if changed_n else [],
            },
        }
        diagnostics = None
        if changed.plan.ch is not None:
            # A view of the session's, gone with the transaction's rollback below (nothing else is written here);
            # the changed rows' positions hashed and probed by the baseline's scan, never a sort of it.
            cur.execute("SET LOCAL enable_mergejoin = off")
            cur.execute(
                sql.SQL(
                    "CREATE TEMP VIEW {whole} ({cols}) AS SELECT {others} FROM {old} b"
                    " WHERE NOT EXISTS (SELECT 1 FROM {run} r WHERE r.o = b.o) UNION ALL SELECT {cols} FROM {run}"
                ).format(
                    whole=ident(_WHOLE),
                    others=unchanged_values(changed.names),
                    old=old,
                    run=run,
                    cols=sql.SQL(", ").join(ident(n) for n in changed.names),
                )
            )
            diagnostics = diagnose(cur, ident("pg_temp", _WHOLE), changed.plan, rows)
            conn.rollback()
        cur.execute(
            sql.SQL("COMMENT ON COLUMN {}.k IS %s").format(run), (f"{TAKE_OVER}{diff.FILE_TAG}{changed.baseline.file}",)
        )
    return {"diagnostics": diagnostics, "diff": changes}


def _copy_unchanged(engine: Any, company: str, changed: Changed, keys_table: str) -> int:
    """Copy the baseline's rows of the unchanged items into the run table (`unchanged_values`); how many."""
    names = changed.names
    with raw_connection(engine) as conn, conn.cursor() as cur:
        scan_settings(cur)
        cur.execute(
            sql.SQL(
                "INSERT INTO {run} ({cols}) SELECT {select} FROM {old} b"
                " WHERE NOT EXISTS (SELECT 1 FROM {keys} c WHERE c.{key} = b.k)"
            ).format(
                run=ident(company, changed.run_table),
                cols=sql.SQL(", ").join(ident(n) for n in names),
                select=unchanged_values(names),
                old=ident(company, changed.baseline.table),
                keys=ident(company, keys_table),
                key=ident(KEY),
            )
        )
        return int(cur.rowcount)


def keys_table_of(target: Target) -> str:
    """The delta run's table of its changed items' keys (pipeline/delta.py)."""
    from firefeed.dataplane.names import rules_tmp_table
    from firefeed.pipeline.delta import KEYS

    return rules_tmp_table(target.run_id, KEYS)


def ruled_table_of(target: Target) -> str:
    """The delta run's table of its changed items' rows after the rules (pipeline/delta.py)."""
    from firefeed.dataplane.names import rules_tmp_table
    from firefeed.pipeline.delta import RULED

    return rules_tmp_table(target.run_id, RULED)


class _Lines:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes, /) -> int:
        self.parts.append(data)
        return len(data)


def _changed_copy(target: Target, export: ExportSpec, title: str | None) -> tuple[Any, Piece]:
    """The export's rendering and the SELECT of the changed items' rows it renders, in `_ff_ord` order."""
    ruled = replace(target, table=ruled_table_of(target))
    p = plan(ruled, export)
    rendering = _rendering(export, p.columns, title)
    select = (
        sql_text("SELECT ")
        + rendering.row
        + Piece(sql.SQL(" FROM {}").format(ident(company_schema(target.company), ruled.table)))
        + p.where
        + Piece(sql.SQL(" ORDER BY {}").format(ident(ORD)))
    )
    return rendering, select


#: the changed lines' COPY's sort memory (as `quality.scan_settings` gives the run table's hash)
_SORT_MEMORY = "SET LOCAL work_mem = '128MB'"


def _copy_out(engine: Any, export: ExportSpec, rendering: Any, select: Piece, sink: Any) -> int:
    """COPY the rows of `select` as `rendering` renders them into `sink`; how many."""
    try:
        with raw_connection(engine) as conn:
            _ready(conn)
            with conn.cursor() as cur:
                _begin_read(cur)
                # The changed rows sorted in memory: with the default 4 MB, 75k rows (65 MB) were sorted on disk,
                # 0.3 s more of the COPY that feeds the file's writer.
                cur.execute(_SORT_MEMORY)
                query = sql_text("COPY (") + select + sql_text(f") TO STDOUT WITH ({rendering.options})")
                cur.copy_expert(render(query, cur), sink)
                return int(cur.rowcount)
    except psycopg2.Error as exc:
        message = (exc.pgerror or str(exc)).strip()
        raise ExportError(export.name, f"reading the items failed: {message}") from exc


def new_lines(engine: Any, target: Target, export: ExportSpec, title: str | None) -> tuple[bytes, list[bytes]]:
    """The export's head and the changed items' lines (with their line end), rendered as the full export
    renders them, in `_ff_ord` order; NotPatched when they are more lines than items (a value holds a newline)."""
    rendering, select = _changed_copy(target, export, title)
    sink = _Lines()
    stream = rendering.framing(sink)
    items = _copy_out(engine, export, rendering, select, stream)
    stream.finish()
    data = b"".join(sink.parts)
    lines = data.split(b"\n")
    if lines[-1] != b"" or len(lines) - 1 != items:
        raise NotPatched("a changed item's value holds a newline")
    return rendering.head, [line + b"\n" for line in lines[:-1]]


_DONE = b""


class ChangedLines:
    """The changed items' lines as a COPY on a thread of its own renders them, in `_ff_ord` order, handed on
    while they come: `patch_file` writes the file meanwhile, where `new_lines` made it wait for the last.

    For the formats whose COPY writes reach the file unframed, one item a write (csv, tsv:
    `line_index.FORMATS`): each write must be one line, with its line end (NotPatched when a value holds a
    newline). Iterate once; `lengths` are then the lines' lengths. `result()` waits for the COPY (its error
    re-raised): call it on every path, as for a `Beside`."""

    def __init__(self, engine: Any, target: Target, export: ExportSpec, title: str | None) -> None:
        from firefeed.export import line_index

        if export.format not in line_index.FORMATS:
            raise NotPatched(f"{export.format} lines are not one COPY write an item")
        rendering, select = _changed_copy(target, export, title)
        self.head: bytes = rendering.head
        self.lengths = array("Q")
        self._queue: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._copy = Beside(lambda: self._run(engine, export, rendering, select))

    def _run(self, engine: Any, export: ExportSpec, rendering: Any, select: Piece) -> int:
        try:
            return _copy_out(engine, export, rendering, select, self)
        finally:
            self._queue.put(_DONE)

    def write(self, data: bytes, /) -> int:
        if data:
            self._queue.put(bytes(data))
        return len(data)

    def __iter__(self) -> Iterator[bytes]:
        while (line := self._queue.get()) != _DONE:
            if line.find(b"\n") != len(line) - 1:
                raise NotPatched("a changed item's value holds a newline")
            self.lengths.append(len(line))
            yield line
        self._copy.result()  # the COPY's error, when it failed

    def result(self) -> int:
        return int(self._copy.result())


def baseline_ords(engine: Any, target: Target, changed: Changed) -> array[int]:
    """Every item's position in the last file (`o` of its published keys), ascending: the line index keeps
    them for the next patch (a delta moves no item), which then finds the changed items' places by them."""
    company = company_schema(target.company)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        scan_settings(cur)
        # One bytea of the positions as they lie (8 bytes each, big-endian), sorted here when they are not in
        # order already (a table a full run published is): 0.40 s against 0.7-0.9 s for a sorted COPY of 946k
        # numbers parsed one by one.
        cur.execute(
            sql.SQL("SELECT coalesce(string_agg(int8send(o), ''::bytea), ''::bytea) FROM {}").format(
                ident(company, changed.baseline.table)
            )
        )
        ords = _int8s(bytes(cur.fetchone()[0]))
    if any(a >= b for a, b in itertools.pairwise(ords)):
        ords = array("q", sorted(ords))
    return ords


def left_the_export(engine: Any, target: Target, changed: Changed, ords: Sequence[int]) -> None:
    """NotPatched when a changed item the export does not select now is among the last file's items (at
    `ords`, ascending): it left the export. An item's position is its identity between a run and its delta
    (a delta moves no item, and the baseline is the last file's: `changed_rows`), as `places_of` takes it for
    the items the export selects; this spares `complete` a count over the baseline's ~1M rows (0.3 s)."""
    company = company_schema(target.company)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        # Every changed item's position, from the delta's keys table (it carries them: pipeline/delta.py).
        cur.execute(
            sql.SQL("SELECT coalesce(string_agg(int8send({o}), ''::bytea), ''::bytea) FROM {t}").format(
                o=ident(ORD), t=ident(company, keys_table_of(target))
            )
        )
        every = _int8s(bytes(cur.fetchone()[0]))
    # The changed items the export does not select now (few: a set difference in C), each looked for.
    for o in set(every).difference(changed.ords):
        at = bisect.bisect_left(ords, o)
        if at < len(ords) and ords[at] == o:
            raise NotPatched("a changed item enters or leaves the export")


def _int8s(data: bytes) -> array[int]:
    """The big-endian 8-byte integers of `int8send`s joined."""
    return network_ints(data, "q")


def places_of(ords: Sequence[int], changed: Sequence[int]) -> list[int]:
    """The places of the items at positions `changed` (ascending) among a file's items at positions `ords`
    (ascending); NotPatched when one is not among them (a changed item entered the export: one that left it
    is `complete`'s count)."""
    # A bisection each, in C (a loop of them in Python cost 0.1 s of 75k changed items), then checked at once.
    places = list(map(bisect.bisect_left, itertools.repeat(ords), changed))
    try:
        found = list(map(ords.__getitem__, places))
    except IndexError:  # past the last item
        raise NotPatched("a changed item enters or leaves the export") from None
    if found != list(changed):
        raise NotPatched("a changed item enters or leaves the export")
    return places


def patch_file(
    old: Path,
    dest: Path,
    *,
    export: ExportSpec,
    head: bytes,
    rows: int,
    places: Sequence[int],
    lines: Iterable[bytes],
    bounds: WriteBounds | None,
    index: LineIndex | None = None,
) -> tuple[int, int, str]:
    """Write `dest`: `old` with its `places`' lines replaced by `lines`; (rows, bytes, sha256).

    NotPatched when `old` is not `head` and then `rows` lines. `old` is mapped, not read. With `index` (its
    items' lengths, export/line_index.py) the unchanged spans between the changed lines are joined as they
    are, cut nowhere (`_spans`); without, the file is cut in blocks at line ends: a block without a changed
    line is handed on as it is, one with some is split into its lines (C speed) and joined again
    (`_chunks`). Hashing and writing run on a thread each (both release the GIL): on 1M items (690 MB)
    cutting the blocks takes ~1.1 s, hashing ~0.45 s, writing ~1 s, which one thread did one after the other.
    """
    limit = None
    if bounds is not None:
        check_free_space(export.name, dest.parent, bounds)
        limit = bounds.limit
    try:
        with open(old, "rb") as src, _Output(dest, limit) as out:
            size = os.fstat(src.fileno()).st_size
            buf: Any = mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            try:
                chunks: Generator[bytes, None, None]
                if index is not None:
                    chunks = _spans(buf, head, rows, places, lines, index)
                else:
                    chunks = _chunks(buf, head, rows, places, list(lines))
                try:
                    for chunk in chunks:
                        out.write(chunk)
                finally:
                    chunks.close()  # its views of `buf` go before `buf` is closed
            finally:
                if size:
                    buf.close()
        return rows, out.bytes, out.sha256
    except OutputLimitError as exc:
        assert bounds is not None
        raise too_large(export.name, bounds) from exc
    except OSError as exc:
        raise ExportError(export.name, f"writing the file failed: {exc.strerror or type(exc).__name__}") from exc


def _spans(
    buf: Any, head: bytes, rows: int, places: Sequence[int], lines: Iterable[bytes], index: LineIndex
) -> Generator[bytes, None, None]:
    """The new file's bytes in blocks of about `_BLOCK`: `buf` (the last file, of `index`'s items) with the items
    at `places` replaced, each found by the lengths of the items before it. NotPatched unless the index is
    the last file's and every replaced item starts after a line end and ends with one."""
    lengths = index.lengths
    if len(buf) != index.size or index.head != len(head) or len(lengths) != rows:
        raise NotPatched("the kept line lengths are not the last file's")
    if buf[: len(head)] != head:
        raise NotPatched("the last file does not start with the export's head")
    pending: list[Any] = [head]
    filled = len(head)
    with memoryview(buf) as view:
        try:
            pos, item = len(head), 0  # the first byte and the item not yet handed on
            them = iter(lines)
            for place in places:
                line = next(them, None)
                if line is None:
                    raise NotPatched("fewer changed lines than changed items")
                start = pos + sum(lengths[item:place])
                end = start + lengths[place]
                if (start and buf[start - 1] != _LF) or buf[end - 1] != _LF:
                    raise NotPatched("the kept line lengths do not fit the last file")
                while start - pos > _BLOCK - filled:  # a long unchanged span: cut in blocks
                    cut = pos + max(_BLOCK - filled, 1)
                    pending.append(view[pos:cut])
                    yield b"".join(pending)
                    pending, filled, pos = [], 0, cut
                pending += (view[pos:start], line)
                filled += start - pos + len(line)
                pos, item = end, place + 1
                if filled >= _BLOCK:
                    yield b"".join(pending)
                    pending, filled = [], 0
            if next(them, None) is not None:
                raise NotPatched("more changed lines than changed items")
            if pos + sum(lengths[item:]) != len(buf):
                raise NotPatched("the kept line lengths do not fit the last file")
            while pos < len(buf):
                cut = min(len(buf), pos + max(_BLOCK - filled, 1))
                pending.append(view[pos:cut])
                yield b"".join(pending)
                pending, filled, pos = [], 0, cut
            if pending:
                yield b"".join(pending)
        finally:
            pending.clear()  # its views of `view` go before `view` is released, whatever ended the walk


def _chunks(
    buf: Any, head: bytes, rows: int, places: Sequence[int], lines: Sequence[bytes]
) -> Generator[bytes, None, None]:
    """The new file's bytes, block by block: `buf` (the last file) with the lines at `places` replaced."""
    if buf[: len(head)] != head:
        raise NotPatched("the last file does not start with the export's head")
    yield head
    size, start = len(buf), len(head)
    line = 0  # the item whose line starts the next block
    at = 0  # the next changed place
    while start < size:
        end = buf.rfind(b"\n", start, min(start + _BLOCK, size)) + 1
        if end <= start:  # a line longer than a block
            end = buf.find(b"\n", start) + 1
            if end <= 0:
                raise NotPatched("the last file is not one line per item")
        chunk = buf[start:end]
        n = chunk.count(b"\n")
        if at < len(places) and places[at] < line + n:
            parts = chunk.split(b"\n")
            while at < len(places) and places[at] < line + n:
                parts[places[at] - line] = lines[at][:-1]
                at += 1
            chunk = b"\n".join(parts)
        yield chunk
        line += n
        start = end
    if line != rows or at != len(places):
        raise NotPatched("the last file is not one line per item")


class _Output:
    """The new file's bytes, counted (up to `limit`: OutputLimitError), hashed and written on two threads."""

    def __init__(self, dest: Path, limit: int | None) -> None:
        # Written from its start and cut at its end, not emptied first: `dest` may be a kept spare whose cached
        # pages the new bytes take (storage/spares.py).
        self._file = open_over(dest)
        self._writeback = Writeback(self._file)
        self._limit = limit
        self.bytes = 0
        self._sha = hashlib.sha256()
        self._error: BaseException | None = None
        self._queues: list[queue.Queue[bytes | None]] = [queue.Queue(maxsize=4) for _ in range(2)]
        self._threads = [
            threading.Thread(target=self._run, args=(q, fn), name=f"export-patch-{name}", daemon=True)
            for q, fn, name in zip(self._queues, (self._sha.update, self._write), ("hash", "write"), strict=True)
        ]
        for thread in self._threads:
            thread.start()

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self._writeback.wrote(len(data))

    def _run(self, q: queue.Queue[bytes | None], fn: Callable[[Any], object]) -> None:
        while (data := q.get()) is not None:
            if self._error is None:
                try:
                    fn(data)
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc

    def write(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        self.bytes += len(data)
        if self._limit is not None and self.bytes > self._limit:
            raise OutputLimitError(self._limit)
        for q in self._queues:
            q.put(data)

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, *exc: object) -> None:
        for q in self._queues:
            q.put(None)
        for thread in self._threads:
            thread.join()
        try:
            if self._error is None and exc[0] is None:
                self._file.truncate()
        finally:
            self._file.close()
        if self._error is not None and exc[0] is None:
            raise self._error


class Beside:
    """`fn()` on a thread of its own (the log lines keep the run id); `result()` waits and re-raises."""

    def __init__(self, fn: Callable[[], Any], name: str = "export-patch") -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run, fn), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # re-raised by result() in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
