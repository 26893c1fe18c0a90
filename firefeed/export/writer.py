"""write_export: one channel feed from a project's final items table, written atomically.

Postgres renders the rows (COPY), Python only adds the format's head and tail,
optional gzip, and the hash; see `_copy` for how `_ff_ord` order is kept
without a sort, and `_atomic` for the all-or-nothing file replacement.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg2
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.errors import ExportError, FireFeedError
from firefeed.export import line_index
from firefeed.export._atomic import OutputLimitError, atomic_output
from firefeed.export._copy import copy_item_groups, copy_items, reads_in_order
from firefeed.export.bounds import WriteBounds, check_free_space, too_large
from firefeed.export.delimited import render_delimited
from firefeed.export.google_xml import XmlGroups, render_google_xml
from firefeed.export.jsonish import render_json, render_jsonl
from firefeed.export.rendering import Rendering
from firefeed.export.select import OutputColumn, Piece, output_columns, sql_text, where_clause
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.schema.identifiers import ident

if TYPE_CHECKING:
    from firefeed.spec.model import ExportSpec


@dataclass(frozen=True)
class ExportResult:
    """What the RunReport lists per export (SPEC section 5)."""

    name: str
    path: str
    rows: int
    bytes: int
    sha256: str


def _rendering(export: ExportSpec, columns: Sequence[OutputColumn], title: str | None) -> Rendering:
    if export.format in ("csv", "tsv"):
        return render_delimited(columns, export.format, export.list_separator)
    if export.format == "json":
        return render_json(columns)
    if export.format == "jsonl":
        return render_jsonl(columns)
    if export.format == "google-xml":
        name = title or export.name
        return render_google_xml(
            columns, title=name, link=export.channel_link or "", description=export.channel_description or name
        )
    raise ExportError(export.name, f"unknown format {export.format!r}")


def view_reads_in_order(engine: Engine, schema: str, table: str) -> bool:
    """Whether the file's COPY would read the view `table` in `_ff_ord` order without a sort (`_copy`)."""
    with raw_connection(engine) as conn:
        return reads_in_order(conn, schema, table)


def reads_rows(export: ExportSpec) -> bool:
    """Whether the export's writer reads its items by a plain scan, so a view serves it as a table
    would: every format but google-xml, whose groups are runs of heap pages (`copy_item_groups`)."""
    return export.format != "google-xml"


def write_export(
    engine: Engine,
    *,
    schema: str,
    table: str,
    fields: Sequence[str],
    export: ExportSpec,
    dest: Path,
    title: str | None = None,
    lists: ListFields = NO_LISTS,
    scratch: bool = False,
    bounds: WriteBounds | None = None,
    only: Piece | None = None,
    lengths: array[int] | None = None,
) -> ExportResult:
    """Write `export` of the items in `schema.table` to `dest`, replacing it atomically.

    `fields` are the item fields in order (key first); the table has one column
    per field (`column_for_field`). `dest` should come from `resolve_export_path`
    (with `gzip=export.gzip`); it is written gzip-compressed when `export.gzip`.
    `title` is the google-xml channel's (default: the export's name); its link
    and description are the export's own (`channel_link`, `channel_description`).
    Database and file errors become ExportError naming the export; the
    previous file at `dest` is then untouched. `scratch`: `dest` is a temporary
    that `Storage.writing` publishes, filled directly (see `atomic_output`). `bounds`: the free space
    `dest`'s folder must have before a byte is written, and the most bytes the export may write
    (export/bounds.py); past either an ExportError naming the bound, `dest` untouched. `only`: a
    condition the written items meet besides the export's `where` (`invalid_items: exclude`). `lengths`:
    filled with each item's byte length when the format's rows reach the file as COPY writes them (csv,
    tsv: `line_index.FORMATS`, uncompressed); left empty otherwise (export/line_index.py).
    """
    columns = output_columns(fields, export, lists)
    rendering = _rendering(export, columns, title)
    where = where_clause(fields, export, lists, ident(schema, table))
    if only is not None:
        where = (where + sql_text(" AND ") if export.where_condition is not None else sql_text(" WHERE ")) + only
    limit = None
    if bounds is not None:
        check_free_space(export.name, dest.parent, bounds)
        limit = bounds.limit
    try:
        with atomic_output(dest, compress=export.gzip, scratch=scratch, limit=limit) as out:
            out.write(rendering.head)
            if lengths is not None and export.format in line_index.FORMATS and not export.gzip:
                out.record(lengths)  # COPY's writes reach `out` as they are (`_Unframed`)
            stream = rendering.framing(out)
            if isinstance(stream, XmlGroups):
                with raw_connection(engine) as conn, out.stopping(conn.cancel):
                    copy_item_groups(conn, schema=schema, table=table, line=rendering.row, where=where, sink=stream)
                rows = stream.items
            else:
                with raw_connection(engine) as conn, out.stopping(conn.cancel):
                    rows = copy_items(
                        conn,
                        schema=schema,
                        table=table,
                        row=rendering.row,
                        where=where,
                        options=rendering.options,
                        sink=stream,
                    )
                stream.finish()
            out.record(None)
            out.write(rendering.tail(rows))
    except FireFeedError:
        raise
    except OutputLimitError as exc:
        assert bounds is not None
        raise too_large(export.name, bounds) from exc
    except psycopg2.Error as exc:
        message = (exc.pgerror or str(exc)).strip()
        raise ExportError(export.name, f"reading the items failed: {message}") from exc
    except OSError as exc:
        # Not `dest` (a server path) nor str(exc), which names it too: the tenant sees this message.
        raise ExportError(export.name, f"writing the file failed: {exc.strerror or type(exc).__name__}") from exc
    return ExportResult(name=export.name, path=str(dest), rows=rows, bytes=out.bytes, sha256=out.sha256)
