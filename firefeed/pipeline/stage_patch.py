"""PARSE by patch (#52): a changed csv source's staging table with only its changed records staged again.

A full parse of the 1M-item feed costs 12-25 s, most of a refresh where 1% of the items changed. When
the source's kept copy (dataplane/parsed_copy.py) is the bytes its staging table was parsed from,
`record_diff.diff_records` names the records whose bytes changed, record for record (none added,
removed or moved, the header the same). Only their new bytes are parsed, after the header, by the
same reader settings and the same COPY (`stage.stage_source`) as a full parse, into a run table; their
rows then replace the staged ones in place, keeping each row's `_ff_ord`, and the rows they replace
are copied into a second run table first; `_ff_line` follows a record whose line count changed. The
staged rows are found by the records' keys (`_keys_kept`: none shared, each one staged row), else by
their old bytes parsed as well and compared value for value (the whole row, so a repeated key cannot
mislead). The staging table then holds what a full parse would
have staged (its rows' values, ords and lines: only the rows' places in the heap differ), and the
new and old rows' tables, with their real ords, are what the delta merges (pipeline/delta.py): for the
primary, MERGE's SELECT over the records' new rows; for an enrich source, the candidate keys (and their
new and kept values) read from the two tables, with no previous staging kept to compare.

Anything that could make a full parse stage otherwise refuses the patch, with the reason the PARSE
detail shows, and the source is parsed in full: the last parse skipped malformed rows, removed NULs
or warned; it decoded otherwise than UTF-8, or a changed record is not UTF-8; a changed record is
not one row, or changes its key or has an empty one; its old bytes are not a staged row (the kept
copy is not the staging's); the header changed; too many records changed.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg2 import sql
from psycopg2.extras import execute_values

from firefeed.dataplane import parsed_copy
from firefeed.dataplane.names import rules_tmp_table
from firefeed.db.binary import network_ints
from firefeed.db.engine import raw_connection
from firefeed.db.models import Source
from firefeed.errors import ParseError
from firefeed.pipeline.context import RunContext
from firefeed.pipeline.merge import trimmed
from firefeed.pipeline.stage import LINE, StageResult
from firefeed.pipeline.steps._shared import parse_signature
from firefeed.schema.identifiers import ORD, column_for_field, company_schema, ident
from firefeed.spec.model import SourceSpec
from firefeed.textutil import WHITESPACE

if TYPE_CHECKING:
    from firefeed.pipeline.record_diff import ChangedRecord

log = logging.getLogger(__name__)

#: run tables (pass numbers apart from the project's passes and the delta's 9_000_001-5) of the changed
#: records' new and old rows, each with its staged row's `_ff_ord` once patched; source i's are these plus
#: `_PATCH_STRIDE * i` (sources may be parsed at once, each patching its own)
PATCH_NEW, PATCH_OLD = 9_000_006, 9_000_007
_PATCH_STRIDE = 10
#: at most this share of the rows (or `MIN_CHANGED`) may change, or have their line numbers moved, for a
#: patch: past it the patch and what it saves after it cost more than a full parse. Measured on the bench's
#: stock refresh (804,806 short rows, 80,481 changed: 10.0006%, over the 0.1 this was), full parse and
#: patch interleaved on a shared machine: the patch's PARSE 1.6-2.0 s (the diff 0.55-0.8, the changed
#: records' old and new rows parsed 0.4-0.65, the staged rows replaced 0.6-0.8) against a full parse's
#: 1.05-1.6 s; but the delta's MERGE then reads the patch's rows instead of a FULL JOIN of the whole kept
#: and new staging and counting its keys (MERGE 2.75-3.5 s -> 1.7-1.9 s): PARSE + MERGE 3.8-4.7 s -> 3.45-3.85 s.
#: The patch's cost grows with the changed records (~0.16 s a percent there), the full way's does not: even
#: near 14%, so 0.12 admits the bench with a margin (a primary's full parse, 10-25 s of wide rows, is further
#: off: its bound could be larger).
MAX_CHANGED_SHARE = 0.12
#: how a patch found the changed records' staged rows (the PARSE detail's `found_by`): by their keys, or by their
#: old records parsed again (a key of two staged rows, or one csv does not read here)
KEYS, OLD_RECORDS = "keys", "old records"
MIN_CHANGED = 16
#: the longest header record looked for at the start of the file
_HEADER_MAX_BYTES = 1 << 20
_UTF8 = "utf-8"
#: temporary tables of the patch's transaction: where the changed rows are, and the line shifts
_AT, _SHIFTS = "ff_patch_at", "ff_patch_shifts"


@dataclass(frozen=True)
class Patched:
    """A staging table patched: how many records changed, the run tables of their new and old rows, and how
    their staged rows were found (`KEYS` or `OLD_RECORDS`; None when no record changed)."""

    changed: int
    new_rows: str
    old_rows: str
    found_by: str | None = None


class Refused(Exception):
    """The patch cannot prove it stages what a full parse would: parse in full (the message says why)."""


def copy_reason(src: SourceSpec, minimum: int, size: int) -> str | None:
    """Why no copy of the file is kept for the next parse to patch from; None: one is."""
    if minimum <= 0:
        return "no copy is kept (FIREFEED_PARSE_KEEP_COPY_MIN_BYTES is 0)"
    if src.resolved_format not in ("csv", "tsv"):
        return f"the source is {src.resolved_format}, not csv"
    if src.preset is not None:
        return "the source has a preset"
    if size <= minimum:
        return "the file is not larger than FIREFEED_PARSE_KEEP_COPY_MIN_BYTES"
    return None


def patchable(src: SourceSpec, row: Source | None) -> str | None:
    """Why a changed source (whose copy is kept) is not even tried by patch; None: it may be (the kept
    copy and the staging are checked by `patch_staging`)."""
    if row is None or row.parse_signature is None or row.content_sha256 is None or row.staged_fields is None:
        return "the staging table is not known to be whole (no parse succeeded since the last one began)"
    if row.parse_signature != parse_signature(src):
        return "the source's parse settings changed"
    return None


def kept_reason(ctx: RunContext, src: SourceSpec, row: Source, table: str) -> str | None:
    """Why the kept copy and the staging table cannot be patched; None: the copy is what the staging holds."""
    stats = row.staged_stats or {}
    why = stats_reason(stats, ctx.settings.parse_max_value_chars)
    if why is not None:
        return why
    kept = parsed_copy.KeptCopy.from_json(stats.get(parsed_copy.KEPT_COPY))
    if kept is None:
        return "no copy of the last parsed file is kept"
    if kept.sha256 != row.content_sha256:
        return "the kept copy is not the file the staging table was parsed from"
    if not kept.matches(parsed_copy.path(ctx.settings, ctx.spec.company, ctx.spec.project, src.name)):
        return "the kept copy is gone or changed on disk"
    rows = int(stats.get("rows", 0))
    if rows <= 0 or not ctx.data.schema.table_has_rows(ctx.spec.company, table):
        return "the staging table is empty (crash recovery empties it)"
    return None


def stats_reason(stats: dict[str, Any], max_value_chars: int) -> str | None:
    """Why a staging its parse left with `stats` (its `staged_stats`) is never patched; None: it may be.

    PARSE asks it too before keeping a copy (`parse.parse_one`): a copy this refuses is never used."""
    if int(stats.get("malformed", 0)) or stats.get("malformed_lines"):
        return "the last parse skipped malformed rows"
    if "nul_removed" not in stats or int(stats["nul_removed"]):
        return "the last parse removed NUL characters (or did not say)"
    if stats.get("warnings"):
        return "the last parse warned"
    if stats.get("encoding") != _UTF8:
        return "the last parse did not decode UTF-8"
    if stats.get("max_value_chars") != max_value_chars:
        # A lower cap would make rows of unchanged records malformed in a full parse.
        return "the longest value a parse takes (FIREFEED_PARSE_MAX_VALUE_CHARS) is not the last parse's"
    return None


def patch_tables(run_id: str, index: int) -> tuple[str, str]:
    """The run tables of source `index`'s changed records' new and old rows."""
    step = _PATCH_STRIDE * index
    return rules_tmp_table(run_id, PATCH_NEW + step), rules_tmp_table(run_id, PATCH_OLD + step)


def patch_staging(ctx: RunContext, src: SourceSpec, row: Source, table: str, new_file: Path, index: int = 0) -> Patched:
    """Patch `table` (the staging of source `index`) to what a full parse of `new_file` stages; Refused when
    it cannot prove that (nothing is changed then). `row`: the source's `sources` row as the staging's parse
    left it."""
    from firefeed.pipeline.record_diff import diff_records

    reason = kept_reason(ctx, src, row, table)
    if reason is not None:
        raise Refused(reason)
    stats = row.staged_stats or {}
    rows = int(stats["rows"])
    fields = list(row.staged_fields or [])
    key = ctx.spec.key
    if key not in fields or src.key_template is not None:
        raise Refused("the key is not a field of the file")
    most = max(MIN_CHANGED, int(rows * MAX_CHANGED_SHARE))
    started = time.monotonic()
    kept = parsed_copy.path(ctx.settings, ctx.spec.company, ctx.spec.project, src.name)
    header = _header(new_file)
    delimiter = _delimiter(src, header)
    quotes_checked = bool((stats.get(parsed_copy.KEPT_COPY) or {}).get("quotes_checked"))
    diff = diff_records(kept, new_file, max_changed=most, delimiter=delimiter, old_quotes_checked=quotes_checked)
    if diff.refused is not None:
        raise Refused(f"the file is not the last one with some records changed: {diff.refused}")
    changed = list(diff.changed)
    diffed = time.monotonic()
    new_t, old_t = patch_tables(ctx.run_id, index)
    if not changed:
        _empty_tables(ctx, fields, new_t, old_t)
        return Patched(0, new_t, old_t)
    _check_bytes(changed)
    # The changed records' keys, read from their bytes (None: not here, or not each its own): with them the
    # driver searches the kept result while the records are parsed and staged (~0.5 s of the stock refresh's
    # PARSE, on one core), else once they are staged.
    keys = _keys_kept(changed, delimiter, fields.index(key))
    watched = keys is not None and watch_keys(ctx, index, src, new_t, fields, keys)
    work = Path(ctx.work_dir) / f"patch_{index}"
    work.mkdir(parents=True, exist_ok=True)
    old_lines = [_lines(c.old) for c in changed]
    new_lines = [_lines(c.new) for c in changed]
    _stage_records(ctx, src, work / "new.csv", header, [c.new for c in changed], new_lines, fields, new_t)
    if not watched:
        # Their keys are known: the driver may search the kept result for them while the rest of PARSE runs.
        watch_staged(ctx, index, src, new_t, fields)
    parsed = time.monotonic()
    args = (ctx, table, fields, key, new_t, old_t, old_lines, new_lines, rows, most)
    found_by = KEYS
    try:
        if keys is None:
            raise _NotByKeys
        _apply(*args, old_rows=PATCH_OLD + _PATCH_STRIDE * index)
    except _NotByKeys:
        found_by = OLD_RECORDS
        _stage_records(ctx, src, work / "old.csv", header, [c.old for c in changed], old_lines, fields, old_t)
        _apply(*args)
    log.info(
        "patched %s: %d records staged again (diff %.2f s, their parse %.2f s, the staged rows found by %s, "
        "replaced %.2f s)",
        table,
        len(changed),
        diffed - started,
        parsed - diffed,
        found_by,
        time.monotonic() - parsed,
    )
    return Patched(len(changed), new_t, old_t, found_by)


class _NotByKeys(Exception):
    """The changed records' staged rows cannot be found by their keys alone: by their old records' rows then."""


def _record_keys(records: Sequence[bytes], delimiter: bytes, at: int) -> list[str] | None:
    """Each record's value of the field at `at`, as the full parse's csv reader reads it (a short row's
    missing cells are empty); None when they do not read as one row each here.

    Where no record has a quote up to its key, its cells up to the key are its bytes split at the delimiter
    (a record holds no line end outside quotes, nor a carriage return: record_diff): split in C, where
    csv.reader's lists of every cell cost 0.15 s of the stock refresh's 80k records, 0.3 s of the 1%
    refresh's 10k feed items (their descriptions quoted after the key)."""
    keys: list[bytes] | None
    if at == 0:  # the usual case: every record has its first cell, and it is the whole head
        keys = heads = list(map(itemgetter(0), map(methodcaller("split", delimiter, 1), records)))
    else:
        cut = list(map(methodcaller("split", delimiter, at + 1), records))
        keys = [cells[at] for cells in cut] if all(len(cells) > at for cells in cut) else None
        heads = [delimiter.join(cells[: at + 1]) for cells in cut] if keys is not None else []
    if keys is not None and b'"' not in b"\n".join(heads):
        try:
            return b"\n".join(keys).decode(_UTF8).split("\n") if keys else []
        except UnicodeDecodeError:
            return None
    try:
        text = b"\n".join(records).decode(_UTF8)
        rows = list(
            csv.reader(
                io.StringIO(text, newline=""), delimiter=delimiter.decode(_UTF8), quotechar='"', doublequote=True
            )
        )
    except (UnicodeDecodeError, csv.Error):  # a value over csv's default cap, say: the other way reads it
        return None
    if len(rows) != len(records):
        return None
    return [row[at] if at < len(row) else "" for row in rows]


def _keys_kept(changed: Sequence[ChangedRecord], delimiter: bytes, at: int) -> list[str] | None:
    """The changed records' keys (as the csv reader reads them, untrimmed) when their staged rows may be found
    by them: each keeps its key (Refused otherwise, as a full parse would find the item moved), and no two of
    them share one; else None. Their old rows are then the staged rows of those keys, when each is exactly one
    (`_apply` checks): a kept copy is the file its staging was parsed from (`kept_reason`), so the staged row
    of a key no other record has is the parse of that key's old record, and needs no parse again (0.3-0.45 s
    of the 1M refreshes' PARSE)."""
    old = _record_keys([c.old for c in changed], delimiter, at)
    new = _record_keys([c.new for c in changed], delimiter, at)
    if old is None or new is None:
        return None
    if old != new:
        raise Refused("a changed record changes its key or has an empty key")
    return new if len(set(new)) == len(new) else None


def watch_staged(ctx: RunContext, index: int, src: SourceSpec, new_t: str, fields: Sequence[str]) -> None:
    """Tell a watch of this run in this process (delta_rules.PatchWatch) where the changed records' new rows are."""
    from firefeed.pipeline.delta_rules import PatchWatch
    from firefeed.pipeline.merge import StagedSource

    PatchWatch.staged(ctx.run_id, index, StagedSource.of(src, new_t, fields))


def watch_keys(
    ctx: RunContext, index: int, src: SourceSpec, new_t: str, fields: Sequence[str], keys: Sequence[str]
) -> bool:
    """Tell a watch of this run in this process (delta_rules.PatchWatch) the changed records' keys, before their
    new rows are staged (in `new_t`); False when it must be told where those rows are instead (`watch_staged`)."""
    from firefeed.pipeline.delta_rules import PatchWatch
    from firefeed.pipeline.merge import StagedSource

    return PatchWatch.keyed(ctx.run_id, index, StagedSource.of(src, new_t, fields), keys)


def _empty_tables(ctx: RunContext, fields: Sequence[str], *tables: str) -> None:
    """The run tables of no changed record (the new file's records are the kept ones)."""
    for t in tables:
        ctx.data.schema.create_staging_table(ctx.spec.company, t, [column_for_field(f) for f in fields])


def _header(path: Path) -> bytes:
    """The file's header record's bytes, with its line end (lines until their quotes are balanced, as the
    csv reader finds it). A file opening with a blank line gets that line: its parse then finds other
    fields than the staging's, and the patch is refused."""
    with path.open("rb") as f:
        head = f.read(_HEADER_MAX_BYTES)
    taken, quotes = 0, 0
    for line in head.splitlines(keepends=True):
        taken += len(line)
        quotes += line.count(b'"')
        if quotes % 2 == 0:
            if line.endswith((b"\n", b"\r")):
                return head[:taken]
            break
    raise Refused("the header record has no line end within its first MiB")


def _delimiter(src: SourceSpec, header: bytes) -> bytes:
    """The delimiter a full parse uses (the header's most frequent candidate when `auto`), as one byte."""
    from firefeed.pipeline.parse.csv_reader import _delimiter_option, detect_delimiter

    try:
        chosen = _delimiter_option(src.name, src.delimiter, src.resolved_format)
        text = header.decode(_UTF8)
    except (ParseError, UnicodeDecodeError):
        raise Refused("the header or the delimiter cannot be read") from None
    delimiter = (chosen if chosen is not None else detect_delimiter(text.lstrip("\ufeff"))).encode(_UTF8)
    if len(delimiter) != 1 or delimiter == b'"':
        raise Refused("the delimiter is not one byte")
    return delimiter


def _lines(record: bytes) -> int:
    """The physical lines a record (without its line end) spans with its line end, as the csv reader counts
    them (`\\n`, `\\r\\n` and `\\r` end one; a quoted value may hold any of them)."""
    return len((record + b"\n").splitlines())


def _check_bytes(changed: Sequence[ChangedRecord]) -> None:
    """No NUL (a full parse removes it and warns) and valid UTF-8 in a changed record (else a full parse of
    an `auto` file would decode the whole file as windows-1252)."""
    # Each check once over the records joined (a loop of them cost ~0.1 s of the stock refresh's 80k records):
    # a line end between two records ends any multibyte sequence the first left open, so the joined bytes are
    # UTF-8 only when each record is.
    news = b"\n".join(c.new for c in changed)
    if b"\x00" in news or b"\x00" in b"\n".join(c.old for c in changed):
        raise Refused("a changed record holds a NUL character")
    try:
        news.decode(_UTF8)
    except UnicodeDecodeError:
        raise Refused("a changed record is not UTF-8") from None


def _stage_records(
    ctx: RunContext,
    src: SourceSpec,
    path: Path,
    header: bytes,
    records: Sequence[bytes],
    lines: Sequence[int],
    fields: Sequence[str],
    table: str,
) -> StageResult:
    """`records` after the header, parsed and staged by a full parse's own reader and COPY into `table`;
    Refused unless each record is one clean row where it should start."""
    from firefeed.pipeline.steps.parse import stage_path

    with path.open("wb") as f:
        f.write(header)
        for record in records:  # a record's bytes are without their line end (record_diff)
            f.write(record + b"\n")
    try:
        staged = stage_path(ctx, src, path, table)
    except ParseError as err:
        raise Refused(f"a changed record does not parse: {err}") from None
    finally:
        path.unlink(missing_ok=True)
    st = staged.stats
    if list(staged.fields) != list(fields):
        raise Refused("the changed records' header gives other fields than the staged ones")
    if staged.rows != len(records) or st.malformed or st.nul_removed or st.warnings or st.encoding != _UTF8:
        raise Refused("a changed record is not one clean UTF-8 row")
    # Each record one row, starting where its record does: none was a blank line, none two rows.
    first = len(header.splitlines()) + 1  # the header holds its line end
    expected, at = [], first
    for n in lines:
        expected.append(at)
        at += n
    schema = company_schema(ctx.spec.company)
    with raw_connection(ctx.data.engine) as conn, conn.cursor() as cur:
        # One value of their lines in binary, not a row each (80k rows fetched cost ~0.1 s of the stock patch).
        cur.execute(
            sql.SQL(
                "SELECT coalesce(string_agg(int4send({line}), ''::bytea ORDER BY {ord}), ''::bytea) FROM {t}"
            ).format(line=ident(LINE), t=ident(schema, table), ord=ident(ORD))
        )
        found = network_ints(bytes(cur.fetchone()[0]), "i").tolist()
    if found != expected:
        raise Refused(f"a changed record is not one row where it starts (lines {found[:5]}, not {expected[:5]})")
    return staged


def _find_by_keys(cur: Any, stg: sql.Composable, new: sql.Composable, k: sql.Composable) -> None:
    """`_AT`: the staged rows of the changed records' keys (no key empty: MERGE finds the item by it), each with
    the record (`i`) whose key it has. The new rows' keys are distinct (`_keys_kept`), so no staged row is
    found twice."""
    cur.execute(
        sql.SQL("SELECT count(*) FROM {new} n WHERE {trimmed} = ''").format(
            new=new, trimmed=trimmed(sql.SQL("n.{}").format(k))
        ),
        [WHITESPACE] * 3,
    )
    if cur.fetchone()[0]:
        raise Refused("a changed record changes its key or has an empty key")
    _sized(cur, new)
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE {at} ON COMMIT DROP AS SELECT s.ctid AS tid, s.{ord} AS ord, s.{line} AS line, "
            "n.{ord} AS i FROM {stg} s JOIN {new} n ON s.{k} = n.{k}"
        ).format(at=ident(_AT), ord=ident(ORD), line=ident(LINE), stg=stg, new=new, k=k)
    )


def _find_by_old_rows(
    cur: Any, stg: sql.Composable, new: sql.Composable, old: sql.Composable, k: sql.Composable, columns: list[str]
) -> None:
    """`_AT`: the staged rows equal to the changed records' old rows, each with the record (`i`) it equals."""
    # The key of each record is the same before and after, and not empty (MERGE finds the item by it).
    cur.execute(
        sql.SQL(
            "SELECT count(*) FROM {new} n JOIN {old} o ON o.{ord} = n.{ord} "
            "WHERE n.{k} IS DISTINCT FROM o.{k} OR {trimmed} = ''"
        ).format(new=new, old=old, ord=ident(ORD), k=k, trimmed=trimmed(sql.SQL("n.{}").format(k))),
        [WHITESPACE] * 3,
    )
    if cur.fetchone()[0]:
        raise Refused("a changed record changes its key or has an empty key")
    # Where the old rows are: the staged row with the same values (one scan, probing a hash of the few
    # old rows: analyzed, so the planner hashes them and not the staging table).
    _sized(cur, old)
    same = sql.SQL(" AND ").join(sql.SQL("s.{c} IS NOT DISTINCT FROM o.{c}").format(c=ident(c)) for c in columns)
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE {at} ON COMMIT DROP AS SELECT s.ctid AS tid, s.{ord} AS ord, s.{line} AS line, "
            "o.{ord} AS i FROM {stg} s JOIN {old} o ON s.{k} = o.{k} WHERE {same}"
        ).format(at=ident(_AT), ord=ident(ORD), line=ident(LINE), stg=stg, old=old, k=k, same=same)
    )


def _sized(cur: Any, table: sql.Composable) -> None:
    """`table` analyzed for its row count only, which sizes the join (the planner then hashes it, not the
    staging): a sample of 300 rows, where the default 30,000 computed statistics of every column (0.36 s of
    10k feed items' wide rows, on the 1% refresh's path)."""
    cur.execute("SET LOCAL default_statistics_target = 1")
    cur.execute(sql.SQL("ANALYZE {}").format(table))
    cur.execute("RESET default_statistics_target")


@contextlib.contextmanager
def _transaction(ctx: RunContext) -> Iterator[Any]:
    with raw_connection(ctx.data.engine) as conn, conn.cursor() as cur:
        cur.execute("SET LOCAL work_mem = '256MB'")
        cur.execute("SET LOCAL jit = off")
        # Never a merge join: without statistics on the fresh staging table the planner sorted all of it on
        # disk to find 2,000 rows (1.5 s of 200k rows, where hashing the few old rows takes 0.14-0.25 s).
        cur.execute("SET LOCAL enable_mergejoin = off")
        cur.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield cur


def _apply(
    ctx: RunContext,
    table: str,
    fields: Sequence[str],
    key_field: str,
    new_t: str,
    old_t: str,
    old_lines: Sequence[int],
    new_lines: Sequence[int],
    rows: int,
    most: int,
    *,
    old_rows: int | None = None,
) -> None:
    """Replace the staged rows of the changed records by their new rows, in one transaction (Refused, and
    nothing changed, when a check fails): found by their old rows (staged as `old_t`), their ords kept, the
    lines moved. With `old_rows` they are found by their keys instead (`_keys_kept`), and `old_t` is made,
    as run table `old_rows`, of the staged rows found (_NotByKeys, nothing changed, unless each key is
    exactly one staged row)."""
    schema = company_schema(ctx.spec.company)
    stg, new, old = ident(schema, table), ident(schema, new_t), ident(schema, old_t)
    columns = [column_for_field(f) for f in fields]
    k = ident(column_for_field(key_field))
    n = len(old_lines)
    by_keys = old_rows is not None
    with _transaction(ctx) as cur:
        if by_keys:
            _find_by_keys(cur, stg, new, k)
        else:
            _find_by_old_rows(cur, stg, new, old, k, columns)
        # In binary, an aggregate a column (not 80k rows' tuples fetched).
        cur.execute(
            sql.SQL(
                "SELECT coalesce(string_agg(int8send(i::bigint), ''::bytea ORDER BY i, ord), ''::bytea),"
                " coalesce(string_agg(int8send(ord), ''::bytea ORDER BY i, ord), ''::bytea),"
                " coalesce(string_agg(int4send(line), ''::bytea ORDER BY i, ord), ''::bytea) FROM {at}"
            ).format(at=ident(_AT))
        )
        aggregated = cur.fetchone()
        found = list(
            zip(
                network_ints(bytes(aggregated[0]), "q").tolist(),
                network_ints(bytes(aggregated[1]), "q").tolist(),
                network_ints(bytes(aggregated[2]), "i").tolist(),
                strict=True,
            )
        )
        if [i for i, _, _ in found] != list(range(1, n + 1)):
            if by_keys:
                raise _NotByKeys  # a key of no staged row or of two: their old records say which
            raise Refused("a changed record's old bytes are not exactly one staged row")
        ords = [o for _, o, _ in found]
        if any(b <= a for a, b in itertools.pairwise(ords)):
            if by_keys:
                raise _NotByKeys
            raise Refused("the changed records' old rows are not in the file's order")
        if by_keys:
            assert old_rows is not None
            # The old rows as the staging holds them (each with its staged ord), before they are replaced.
            ctx.data.schema.create_rules_tmp_as(
                ctx.spec.company,
                ctx.run_id,
                old_rows,
                [ORD, LINE, *columns],
                sql.SQL(
                    "SELECT a.ord, s.{line}, {cols} FROM {stg} s JOIN {at} a ON s.ctid = a.tid "
                    "WHERE s.ctid = ANY(ARRAY(SELECT tid FROM {at})) ORDER BY a.ord"
                ).format(
                    line=ident(LINE),
                    cols=sql.SQL(", ").join(sql.SQL("s.{}").format(ident(c)) for c in columns),
                    stg=stg,
                    at=ident(_AT),
                ),
                [],
                conn=cur.connection,
            )
        # Lines: a record spanning more or fewer lines moves the lines of every row after it.
        new_line: list[int] = []
        shifts: list[tuple[int, int, int]] = []  # (after ord, before ord, shift)
        shift = 0
        for j, (_, o, line) in enumerate(found):
            new_line.append(line + shift)
            shift += new_lines[j] - old_lines[j]
            if shift:
                upto = ords[j + 1] if j + 1 < n else rows + 1
                shifts.append((o, upto, shift))
        moved = sum(hi - lo - 1 for lo, hi, _ in shifts)
        if moved > most:
            raise Refused(f"the changed records' line counts move the lines of {moved:,} rows")
        # The run tables take the staged rows' ords and lines: the delta merges them as staged.
        cur.execute(
            sql.SQL("CREATE TEMP TABLE {s} (i bigint, ord bigint, line integer) ON COMMIT DROP").format(
                s=ident(_SHIFTS)
            )
        )
        if not shifts:
            # No record changed its line count: each keeps its staged row's line, found in the table of where
            # the old rows are (sending 80k rows' values from here cost 0.35 s of the stock refresh's patch).
            cur.execute(
                sql.SQL("INSERT INTO {s} (i, ord, line) SELECT i, ord, line FROM {at}").format(
                    s=ident(_SHIFTS), at=ident(_AT)
                )
            )
        else:
            # execute_values sends a statement per page of rows (100 by default): an INSERT, never the CREATE.
            execute_values(
                cur,
                sql.SQL("INSERT INTO {s} (i, ord, line) VALUES %s").format(s=ident(_SHIFTS)).as_string(cur),
                [(i + 1, ords[i], new_line[i]) for i in range(n)],
                page_size=10_000,
            )
        renumbered = ((new, True),) if by_keys else ((new, True), (old, False))  # by keys: `old` has its ords
        for t, moved_line in renumbered:
            line = sql.SQL(", {line} = v.line").format(line=ident(LINE)) if moved_line else sql.SQL("")
            cur.execute(
                sql.SQL("UPDATE {t} p SET {ord} = v.ord{line} FROM {s} v WHERE p.{ord} = v.i").format(
                    t=t, ord=ident(ORD), line=line, s=ident(_SHIFTS)
                )
            )
            if cur.rowcount != n:
                raise Refused("the changed records' rows could not be numbered")
        assign = sql.SQL(", ").join(sql.SQL("{c} = n.{c}").format(c=ident(c)) for c in [LINE, *columns])
        cur.execute(
            sql.SQL(
                "UPDATE {stg} s SET {assign} FROM {at} a JOIN {new} n ON n.{ord} = a.ord "
                "WHERE s.ctid = ANY(ARRAY(SELECT tid FROM {at})) AND s.ctid = a.tid"
            ).format(stg=stg, assign=assign, at=ident(_AT), new=new, ord=ident(ORD))
        )
        if cur.rowcount != n:
            raise Refused(f"{cur.rowcount} staged rows were replaced, not {n}")
        if shifts:
            ranges = sql.SQL(" OR ").join(
                sql.SQL("(s.{ord} > {lo} AND s.{ord} < {hi})").format(
                    ord=ident(ORD), lo=sql.Literal(lo), hi=sql.Literal(hi)
                )
                for lo, hi, _ in shifts
            )
            by = sql.SQL(" ").join(
                sql.SQL("WHEN s.{ord} > {lo} AND s.{ord} < {hi} THEN {d}").format(
                    ord=ident(ORD), lo=sql.Literal(lo), hi=sql.Literal(hi), d=sql.Literal(d)
                )
                for lo, hi, d in shifts
            )
            cur.execute(
                sql.SQL("UPDATE {stg} s SET {line} = s.{line} + CASE {by} END WHERE {ranges}").format(
                    stg=stg, line=ident(LINE), by=by, ranges=ranges
                )
            )
            if cur.rowcount != moved:
                raise Refused(f"{cur.rowcount} rows' lines were moved, not {moved}")
