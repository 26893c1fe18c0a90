"""How a csv list reaches the items table (SPEC 9, P3, P14): staged delimited or as an array literal, the same lists.

A csv/tsv list with a one-character separator is staged as text and split by MERGE; any
other list is staged as an array literal into text[] (`firefeed.pipeline.parse._lists`).
Random cells (white space of several kinds, empty elements, quotes, braces) go through
both, across a primary, an enrich and an append source, and must give the lists Python's
own split gives.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.pipeline.merge import StagedSource, merge_sources
from firefeed.pipeline.parse import open_reader
from firefeed.pipeline.stage import stage_source
from firefeed.schema.identifiers import KEY, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService
from firefeed.spec.model import SourceSpec

pytestmark = pytest.mark.integration

COMPANY = "liststage"
#: (source, mode, separator): the primary and the append source stage delimited, the enrich one a literal
SOURCES = [("main", "enrich", ","), ("photos", "enrich", "::"), ("more", "append", "|")]

_CLEAN = list('ab,|:"\\{}')
#: cells without white space (most real ones: the staging's fast path) and with it
cells = st.one_of(
    st.text(alphabet=st.sampled_from(_CLEAN), max_size=14),
    st.text(alphabet=st.sampled_from([*_CLEAN, " ", "\t", "\u00a0", "\u2003", "\x1f"]), max_size=14),
)
rows = st.lists(st.tuples(st.integers(0, 5), cells), max_size=6)
Body = list[tuple[int, str]]


def elements(cell: str, separator: str) -> list[str]:
    """What SPEC 9 says a cell's list is: split on the separator, trimmed, empty elements dropped."""
    return [e.strip() for e in cell.split(separator) if e.strip()] if cell else []


def _stage(engine: Engine, schema: SchemaService, tmp: Path, index: int, body: Body) -> StagedSource:
    """Source `index` with `tags` from `body`; the primary also has `images`, the tags' cells reversed."""
    name, mode, separator = SOURCES[index]
    path = tmp / f"{name}.csv"
    lists = {"tags": separator, **({"images": ";"} if index == 0 else {})}
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", *lists])
        writer.writerows([str(key), cell, *([cell[::-1]] if index == 0 else [])] for key, cell in body)
    spec = SourceSpec.model_validate({"name": name, "url": path.name, "mode": mode, "lists": lists})
    reader = open_reader(path, source=name, format="csv", lists=spec.lists)
    table = f"stg_{name}"
    result = stage_source(engine, schema, company=COMPANY, table=table, reader=reader, chunk_rows=3)
    return StagedSource.of(spec, table, result.fields)


def expected(bodies: list[Body]) -> dict[str, tuple[list[str], list[str]]]:
    """Each item's tags and images, in item order: the last source holding its key with a non-empty list
    wins (P14); only the primary has images, so an appended item has none."""
    items: dict[str, list[str]] = {}
    images: dict[str, list[str]] = {}
    for index, ((_name, mode, separator), body) in enumerate(zip(SOURCES, bodies, strict=True)):
        first: dict[str, str] = {}
        for key, cell in body:
            first.setdefault(str(key), cell)  # a repeated key keeps its first row
        for key, cell in first.items():
            if key not in items:
                if index > 0 and mode != "append":
                    continue  # an enrich source never adds an item
                items[key] = []
                images[key] = elements(cell[::-1], ";") if index == 0 else []
            if elements(cell, separator):
                items[key] = elements(cell, separator)
    return {key: (tags, images[key]) for key, tags in items.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(main=rows.filter(bool), photos=rows, more=rows)
def test_delimited_and_literal_lists_merge_into_the_lists_python_splits(
    engine: Engine, tmp_path: Path, main: Body, photos: Body, more: Body
) -> None:
    schema = SchemaService(engine)
    schema.create_company_schema(COMPANY)
    bodies = [main, photos, more]
    staged = [_stage(engine, schema, tmp_path, i, body) for i, body in enumerate(bodies)]
    assert [sorted(s.delimited) for s in staged] == [["images", "tags"], [], ["tags"]]
    merge_sources(
        engine, schema, company=COMPANY, table="items_lists", key_field="id", sources=staged,
        list_fields=frozenset({"tags", "images"}),
    )  # fmt: skip
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT {k}, {t}, {i}, array_lower({t}, 1), array_lower({i}, 1) FROM {items} ORDER BY {o}").format(
                k=ident(KEY),
                t=ident(column_for_field("tags")),
                i=ident(column_for_field("images")),
                items=ident(company_schema(COMPANY), "items_lists"),
                o=ident("_ff_ord"),
            )
        )
        got: list[tuple[Any, ...]] = cur.fetchall()
    assert [(k, (list(t), list(i))) for k, t, i, _, _ in got] == list(expected(bodies).items())
    # a split list counts from 1, like any list (P2)
    assert {lower for row in got for lower in row[3:]} <= {1, None}
