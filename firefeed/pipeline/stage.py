"""STAGE: COPY a reader's rows into a fresh staging table, one committed chunk at a time.

Each chunk of `chunk_rows` rows is its own COPY, all in one transaction that
also creates the table (and adds the columns a json/xml feed reveals as it
goes): Postgres then appends every row at the end of the table, so the table
is in feed order and later steps keep that order without sorting, and
`FREEZE` writes the rows already frozen, so the first scan of the table (in
MERGE) does not rewrite every page to set hint bits.

What to load comes as frames (`parse.copy_frames`): the columns, blocks of
COPY text with the last block of each chunk marked, wider columns when the
feed grows, the end. This module only executes them: the COPY pulls its data
through `_CopyFeed.read`, one block per call. For a feed of 24 MB or more the
frames come from a parser child process that reads ahead through a pipe, so
parsing goes on while a COPY ends (a round trip at each of the 500 chunks of
a 1M-item feed) and runs beside both this process and the Postgres backend;
smaller feeds are parsed here, on demand, block k+1 while the backend ingests
block k.

Measured on the 2-core dev machine, chunk_rows 2000. The machine was shared,
so the versions ran interleaved, 5 times each; best / median wall time:
- 1M-item CSV (695 MB), parsed in process as before: 9.7 / 11.3 s (another
  batch: 10.6 / 11.4); with today's cheaper encoding alone: 10.3 / 10.4; with a
  producer thread feeding the COPY instead of a process: 7.9 / 9.3 (9.0 / 9.5),
  since one GIL serves parsing, encoding and the COPY; with the parser
  process: 7.5 / 8.9 (8.3 / 9.0). CPU then: ~0.9 s user + 0.8 s sys here,
  ~6 s user + 1.7 s sys in the child, which sets the pace, ~4.3 s in the
  backend. chunk_rows 50000 is no faster any more: the chunk ends are hidden.
- stock CSV (804,806 short rows, 28 MB): 1.61 / 1.62 s -> 1.18 / 1.22 s; the
  backend (~1 s) and the round trip at each COPY's end are the limit there.
- 100k-item JSON Lines (102 MB): 2.0 s -> 1.8 s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.errors import ParseError
from firefeed.pipeline.parse import Block, EncodingRestart, End, FeedReader, Fields, Frame, ParseStats, copy_frames
from firefeed.schema.identifiers import ORD, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService

log = logging.getLogger(__name__)

#: the staging column holding a row's line number in the feed file
LINE = "_ff_line"
#: Postgres allows 1600 columns; two are ours
MAX_FIELDS = 1598


@dataclass
class StageResult:
    fields: list[str]
    rows: int
    stats: ParseStats


class _CopyFeed:
    """The file object a COPY reads: the blocks of one chunk, from the reader's frames.

    `peek`/`take` look at the frames between COPYs. An exception raised in
    `read` is kept in `error`, because psycopg2 replaces it with a generic
    QueryCanceled.
    """

    def __init__(self, frames: Iterator[Frame]) -> None:
        self._frames = frames
        self._next: Frame | None = None
        self._chunk_over = True
        self.rows = 0
        self.error: BaseException | None = None

    def peek(self) -> Frame:
        if self._next is None:
            self._next = next(self._frames)
        return self._next

    def take(self) -> Frame:
        frame = self.peek()
        self._next = None
        return frame

    def start_chunk(self) -> None:
        self._chunk_over = False

    def read(self, size: int = -1) -> bytes:
        if self._chunk_over:
            return b""
        try:
            frame = self.take()
        except BaseException as exc:
            self.error = exc
            raise
        assert isinstance(frame, Block), frame
        self._chunk_over = frame.last
        self.rows += frame.rows
        return frame.data


def _copy_statement(schema: str, table: str, columns: list[str]) -> sql.Composed:
    # Text format: an empty field is "" (NULL is a backslash-N, which the escaping makes impossible).
    cols = sql.SQL(", ").join(ident(c) for c in [ORD, LINE, *columns])
    return sql.SQL("COPY {} ({}) FROM STDIN (FREEZE)").format(ident(schema, table), cols)


def _columns(reader: FeedReader, fields: list[str], known: int = 0) -> list[str]:
    """The columns for `fields[known:]`."""
    if len(fields) > MAX_FIELDS:
        source = getattr(reader, "source", "?")
        raise ParseError(source, f"the feed has {len(fields)} fields; at most {MAX_FIELDS} are supported")
    return [column_for_field(f) for f in fields[known:]]


def _stage_once(
    engine: Engine, schema_service: SchemaService, company: str, table: str, reader: FeedReader, chunk_rows: int
) -> StageResult:
    with copy_frames(reader, chunk_rows) as frames:
        feed = _CopyFeed(frames)
        # The first frame comes before the table exists: the fields known once the first row is read.
        first = feed.take()
        assert isinstance(first, Fields), first
        columns = _columns(reader, first.names)
        # The source's list fields (SPEC 9) are text[]: COPY parses the array literals the reader wrote.
        # Those a csv reader stages delimited are text (MERGE splits them; parse._lists).
        declared = getattr(reader, "lists", None) or ()
        delimited = getattr(reader, "delimited", None) or {}
        lists = {column_for_field(f) for f in declared if f not in delimited}
        schema = company_schema(company)
        statement = _copy_statement(schema, table, columns)
        with raw_connection(engine) as conn, conn.cursor() as cur:
            schema_service.create_staging_table(company, table, columns, lists=lists, conn=conn)
            while not isinstance(frame := feed.peek(), End):
                if isinstance(frame, Fields):
                    feed.take()
                    new = _columns(reader, frame.names, len(columns))
                    schema_service.add_columns(company, table, new, lists=lists, conn=conn)
                    columns.extend(new)
                    statement = _copy_statement(schema, table, columns)
                    continue
                feed.start_chunk()
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
    the feed reveals new fields; a list field's (the reader's `lists`) is text[], but for those the
    reader stages delimited (its `delimited`). Every value is non-NULL; "" stays "", and an empty
    list is `{}` (or "" delimited).
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
