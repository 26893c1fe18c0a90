"""STAGE: COPY a reader's rows into a fresh staging table, one committed chunk at a time.

The COPY pulls its data: psycopg2 calls `_RowFeed.read`, which parses and
formats the next block of rows on demand. While Python builds block k+1 the
Postgres backend (on the other core) is still ingesting block k, so parsing and
loading overlap without threads or big buffers, and memory holds one block.

Each chunk of `chunk_rows` rows is its own COPY, all in one transaction that
also creates the table (and adds the columns a json/xml feed reveals as it
goes): Postgres then appends every row at the end of the table, so the table
is in feed order and later steps keep that order without sorting, and
`FREEZE` writes the rows already frozen, so the first scan of the table (in
MERGE) does not rewrite every page to set hint bits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.errors import ParseError
from firefeed.pipeline.parse import EncodingRestart, FeedReader, ParseStats
from firefeed.schema.identifiers import ORD, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService

log = logging.getLogger(__name__)

#: the staging column holding a row's line number in the feed file
LINE = "_ff_line"
#: Postgres allows 1600 columns; two are ours
MAX_FIELDS = 1598
#: rows formatted per read() call: ~350 KB of a typical feed, small enough to overlap well
_BLOCK_ROWS = 500


@dataclass
class StageResult:
    fields: list[str]
    rows: int
    stats: ParseStats


class _RowFeed:
    """The file object a COPY reads: the reader's rows in COPY text format, `chunk_rows` per COPY.

    A COPY ends early at a row wider than its column list (the feed grew a
    field); that row waits in `pending` for the next COPY, after the columns
    are added. An exception raised here is kept in `error`, because psycopg2
    replaces it with a generic QueryCanceled.
    """

    def __init__(self, rows: Iterator[tuple[int, list[str]]], chunk_rows: int) -> None:
        self._rows = rows
        self._chunk_rows = max(1, chunk_rows)
        self.pending: tuple[int, list[str]] | None = None
        self.done = False
        self.rows = 0
        self.width = 0
        self._left = 0
        self.error: BaseException | None = None

    def prime(self) -> bool:
        """Fetch the next row into `pending`; False when the reader is exhausted."""
        if self.pending is None and not self.done:
            self.pending = next(self._rows, None)
            self.done = self.pending is None
        return self.pending is not None

    def start_chunk(self, width: int) -> None:
        self.width = width
        self._left = self._chunk_rows

    def read(self, size: int = -1) -> bytes:
        try:
            return self._block()
        except BaseException as exc:
            self.error = exc
            raise

    def _block(self) -> bytes:
        """The next block of rows, as COPY text."""
        budget = min(self._left, _BLOCK_ROWS)
        width = self.width
        items: list[tuple[int, list[str]]] = []
        if budget <= 0:
            return b""
        if self.pending is not None:
            if len(self.pending[1]) > width:
                return b""
            items.append(self.pending)
            self.pending = None
        keep = items.append
        n = len(items)
        if n < budget:
            for item in self._rows:
                k = len(item[1])
                if k != width:
                    if k > width:
                        self.pending = item
                        break
                    item = (item[0], item[1] + [""] * (width - k))
                keep(item)
                n += 1
                if n >= budget:
                    break
            else:
                self.done = True
        if not items:
            return b""
        first = self.rows + 1
        self.rows += n
        self._left -= n
        return _encode_block(items, first, width)


def _encode_block(items: list[tuple[int, list[str]]], first: int, width: int) -> bytes:
    """Rows in COPY text format, escaped block-wise rather than value by value.

    Fields are joined with NUL and rows with RS (U+001E); the UTF-8 bytes are
    escaped in a few whole-block replaces, then NUL becomes tab and RS newline.
    NUL never occurs in values (FeedReader's promise; if broken, the COPY fails
    on a misaligned row rather than storing anything wrong). RS is rare but
    legal: counting it proves no value holds one, else the block is escaped
    value by value.
    """
    join = "\x00".join
    if width:
        parts = [f"{n}\x00{line}\x00{join(values)}" for n, (line, values) in enumerate(items, first)]
    else:
        parts = [f"{n}\x00{line}" for n, (line, _values) in enumerate(items, first)]
    parts.append("")
    try:
        data = "\x1e".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        return _encode_slowly(items, first)
    if data.count(b"\x1e") != len(items):
        return _encode_slowly(items, first)
    if b"\\" in data:
        data = data.replace(b"\\", b"\\\\")
    if b"\t" in data:
        data = data.replace(b"\t", b"\\t")
    if b"\r" in data:
        data = data.replace(b"\r", b"\\r")
    if b"\n" in data:
        data = data.replace(b"\n", b"\\n")
    return data.replace(b"\x00", b"\t").replace(b"\x1e", b"\n")


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\x00": None})


def _encode_slowly(items: list[tuple[int, list[str]]], first: int) -> bytes:
    """The careful path for a block with an RS, a NUL or a lone surrogate in a value."""
    lines = []
    for n, (line, values) in enumerate(items, first):
        escaped = [v.translate(_ESCAPES) for v in values]
        lines.append("\t".join([str(n), str(line), *escaped]) + "\n")
    # "replace": a lone surrogate (from an exotic codec) becomes "?" instead of failing the COPY.
    return "".join(lines).encode("utf-8", "replace")


def _copy_statement(schema: str, table: str, columns: list[str]) -> sql.Composed:
    # Text format: an empty field is "" (NULL is a backslash-N, which the escaping makes impossible).
    cols = sql.SQL(", ").join(ident(c) for c in [ORD, LINE, *columns])
    return sql.SQL("COPY {} ({}) FROM STDIN (FREEZE)").format(ident(schema, table), cols)


def _columns(reader: FeedReader, fields: list[str]) -> list[str]:
    if len(reader.fields) > MAX_FIELDS:
        source = getattr(reader, "source", "?")
        raise ParseError(source, f"the feed has {len(reader.fields)} fields; at most {MAX_FIELDS} are supported")
    return [column_for_field(f) for f in fields]


def _stage_once(
    engine: Engine, schema_service: SchemaService, company: str, table: str, reader: FeedReader, chunk_rows: int
) -> StageResult:
    feed = _RowFeed(iter(reader), chunk_rows)
    # The first row is read before the table exists: by then the reader knows its fields.
    feed.prime()
    columns = _columns(reader, reader.fields)
    schema = company_schema(company)
    statement = _copy_statement(schema, table, columns)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        schema_service.create_staging_table(company, table, columns, conn=conn)
        while feed.prime():
            assert feed.pending is not None
            if len(feed.pending[1]) > len(columns):
                new = _columns(reader, reader.fields[len(columns) :])
                schema_service.add_columns(company, table, new, conn=conn)
                columns.extend(new)
                statement = _copy_statement(schema, table, columns)
            feed.start_chunk(len(columns))
            try:
                cur.copy_expert(statement, feed)
            except Exception:
                if feed.error is not None:
                    raise feed.error from None
                raise
    return StageResult(fields=list(reader.fields), rows=feed.rows, stats=reader.stats)


def stage_source(
    engine: Engine,
    schema_service: SchemaService,
    *,
    company: str,
    table: str,
    reader: FeedReader,
    chunk_rows: int,
) -> StageResult:
    """Load every row of `reader` into a fresh staging table `table` of `company`.

    Columns are `_ff_ord` (1..n in feed order), `_ff_line` (the row's line in
    the file), then one text column per field (`column_for_field`), added as
    the feed reveals new fields. Every value is non-NULL; "" stays "".
    ParseError from the reader propagates; the chunks committed so far stay,
    since the table is rebuilt by the next parse anyway.
    """
    for _attempt in range(2):
        try:
            return _stage_once(engine, schema_service, company, table, reader, chunk_rows)
        except EncodingRestart:
            # The reader switched to windows-1252; the table is recreated from scratch.
            log.info("feed for %s is not UTF-8: staging it again as windows-1252", table)
    raise ParseError(getattr(reader, "source", "?"), "the feed's encoding changed more than once")
