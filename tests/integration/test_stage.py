"""Staging into real Postgres: order, line numbers, exact text, hostile names, growing fields, restarts.

Every test runs twice: with the feed parsed in process and by a parser child
process (forced whatever the file's size); after each, no child may be left.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.errors import ParseError
from firefeed.pipeline.parse import open_reader
from firefeed.pipeline.stage import StageResult, stage_source
from firefeed.schema.identifiers import column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService
from tests.parser_children import record_parser_children

pytestmark = pytest.mark.integration

FEEDS = Path(__file__).parent.parent / "fixtures" / "feeds"
COMPANY = "stagetest"
TABLE = "stg_test"


@pytest.fixture(autouse=True, params=["in_process", "child_process"])
def parsers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The parser processes a test started; each must have been reaped by the time staging returned or raised."""
    started = record_parser_children(monkeypatch, always=request.param == "child_process")
    yield started
    assert all(proc.returncode is not None and proc.stdout and proc.stdout.closed for proc in started)
    if request.param == "in_process":
        assert not started


@pytest.fixture()
def schema(engine: Engine) -> SchemaService:
    service = SchemaService(engine)
    service.create_company_schema(COMPANY)
    return service


def stage(
    engine: Engine, schema: SchemaService, path: Path, fmt: str, chunk_rows: int = 2, **options: str
) -> StageResult:
    reader = open_reader(path, source="main", format=fmt, **options)
    return stage_source(engine, schema, company=COMPANY, table=TABLE, reader=reader, chunk_rows=chunk_rows)


def table_rows(engine: Engine, fields: list[str]) -> list[tuple[Any, ...]]:
    cols = [ident("_ff_ord"), ident("_ff_line")] + [ident(column_for_field(f)) for f in fields]
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT {} FROM {} ORDER BY 1").format(
                sql.SQL(", ").join(cols), ident(company_schema(COMPANY), TABLE)
            )
        )
        return list(cur.fetchall())


def table_columns(schema: SchemaService) -> list[str]:
    return schema.table_columns(COMPANY, TABLE)


def write(tmp_path: Path, data: str | bytes, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_rows_load_in_feed_order_with_their_line_numbers(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "quoted_newlines.csv", "csv")
    assert result.rows == 3 and result.fields == ["id", "description", "price"]
    assert table_rows(engine, result.fields) == [
        (1, 2, "1", "line one\r\nline two\nline three", "1.00"),
        (2, 5, "2", 'say "hi"', "2.00"),
        (3, 6, "3", "last", "3"),
    ]


def test_empty_values_are_empty_text_never_null(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "ragged.csv", "csv")
    rows = table_rows(engine, result.fields)
    assert rows == [(1, 2, "1", "x", "y"), (2, 4, "3", "x", ""), (3, 5, "4", "x", "y")]
    assert result.stats.malformed_lines == [3, 6]
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {} IS NULL").format(
                ident(company_schema(COMPANY), TABLE), ident("b")
            )
        )
        assert cur.fetchone() == (0,)


@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
def test_every_special_character_round_trips(
    engine: Engine, schema: SchemaService, tmp_path: Path, chunk_rows: int
) -> None:
    values = [
        "tab\there",
        "back\\slash",
        "\\N",
        "\\.",
        "new\nline",
        "cr\rlf\r\n",
        "",
        " ",
        '"',
        "'",
        ",;|",
        "\x1e record separator",
        "\x01\x1f\x7f",
        "é 日本 🔥",
        "\\\\t",
        "end\\",
    ]
    items = [{"id": str(i), "v": v} for i, v in enumerate(values)]
    path = write(tmp_path, json.dumps(items), "feed.json")
    result = stage(engine, schema, path, "json", chunk_rows=chunk_rows)
    assert [row[3] for row in table_rows(engine, result.fields)] == values


def test_a_lone_surrogate_is_stored_as_a_replacement_character(
    engine: Engine, schema: SchemaService, tmp_path: Path
) -> None:
    path = write(tmp_path, r'[{"id": "1", "v": "a\ud800b\u0000c"}]', "feed.json")
    result = stage(engine, schema, path, "json")
    assert table_rows(engine, result.fields) == [(1, 1, "1", "a\ufffdbc")]


def test_hostile_header_names_become_columns_and_keep_their_field_names(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "hostile_headers.csv", "csv")
    assert result.fields[4:6] == ["select", "drop table x;--"]
    columns = table_columns(schema)
    assert columns[:2] == ["_ff_ord", "_ff_line"]
    assert columns[2:] == [column_for_field(f) for f in result.fields]
    assert "select" in columns and 'we"ird' in columns and "naïve 日本 🔥" in columns
    assert table_rows(engine, result.fields) == [(1, 2, *[f"v{i}" for i in range(12)])]
    # The table is still there: nothing was executed from a name.
    assert schema.table_exists(COMPANY, TABLE)


def test_fields_that_appear_later_are_added_as_columns(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "typed.json", "json", chunk_rows=1)
    assert result.fields[-1] == "extra"
    assert table_columns(schema)[-1] == "extra"
    rows = table_rows(engine, result.fields)
    assert rows[0][:4] == (1, 4, "1", "1.50") and rows[0][-1] == ""
    assert rows[1][:4] == (2, 8, "2", "2") and rows[1][-1] == "new field"
    assert result.stats.malformed == 1


def test_xml_items_load_with_growing_fields(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "rss_g.xml", "xml", chunk_rows=1)
    assert table_rows(engine, result.fields) == [
        (1, 6, "A1", "Fish & Chips <b>bold</b>", "  19.99 EUR ", "https://x/1.jpg", "", ""),
        (2, 13, "A2", "Café & more", "5.00 EUR", "", "", "Acme"),
    ]


def test_quoted_empty_lines_stage_as_rows_and_blank_lines_do_not(
    engine: Engine, schema: SchemaService, tmp_path: Path
) -> None:
    # SPEC 8.22, both ways (in process and by a parser process): `""` is a record, white space is not.
    path = write(tmp_path, 'id,t\n1,a\n""\n \t\n\n" "\n2,b\n', "feed.csv")
    result = stage(engine, schema, path, "csv")
    assert (result.rows, result.stats.rows, result.stats.malformed) == (4, 4, 0)
    assert table_rows(engine, result.fields) == [(1, 2, "1", "a"), (2, 3, "", ""), (3, 6, " ", ""), (4, 7, "2", "b")]


def test_repeated_names_are_taken_in_order_in_csv_and_xml(
    engine: Engine, schema: SchemaService, tmp_path: Path
) -> None:
    # SPEC 8.23: `color,color,color_2` -> color, color_2, color_2_2, in a CSV header as in an XML item.
    result = stage(engine, schema, write(tmp_path, "color,color,color_2\nr,g,b\n", "feed.csv"), "csv")
    assert result.fields == ["color", "color_2", "color_2_2"]
    assert table_columns(schema)[2:] == [column_for_field(f) for f in result.fields]
    assert table_rows(engine, result.fields) == [(1, 2, "r", "g", "b")]
    doc = "<items><item><color>r</color><color>g</color><color_2>b</color_2></item><item><x/></item></items>"
    result = stage(engine, schema, write(tmp_path, doc, "feed.xml"), "xml")
    assert result.fields[:3] == ["color", "color_2", "color_2_2"]
    assert table_rows(engine, result.fields[:3])[0] == (1, 1, "r", "g", "b")


def test_a_header_only_feed_creates_its_columns_and_no_rows(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "header_only.csv", "csv")
    assert (result.rows, result.fields) == (0, ["id", "title", "price"])
    assert table_columns(schema) == ["_ff_ord", "_ff_line", "id", "title", "price"]
    assert table_rows(engine, result.fields) == []


def test_an_empty_feed_creates_an_empty_table(engine: Engine, schema: SchemaService) -> None:
    result = stage(engine, schema, FEEDS / "empty.csv", "csv")
    assert (result.rows, result.fields) == (0, [])
    assert table_columns(schema) == ["_ff_ord", "_ff_line"]


def test_items_without_fields_still_load(engine: Engine, schema: SchemaService, tmp_path: Path) -> None:
    result = stage(engine, schema, write(tmp_path, "[{}, {}]", "feed.json"), "json")
    assert table_rows(engine, result.fields) == [(1, 1), (2, 1)]


def test_staging_again_replaces_the_table(engine: Engine, schema: SchemaService) -> None:
    stage(engine, schema, FEEDS / "typed.json", "json")
    result = stage(engine, schema, FEEDS / "pipe.csv", "csv")
    assert table_columns(schema) == ["_ff_ord", "_ff_line", "id", "title", "price"]
    assert len(table_rows(engine, result.fields)) == 2


def test_a_late_non_utf8_byte_restages_the_whole_feed_as_windows_1252(
    engine: Engine, schema: SchemaService, tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    good = "".join(f"{i},naïve\n" for i in range(20_000)).encode()
    path = write(tmp_path, b"id,t\n" + good + b"late,\x80uro\n", "feed.csv")
    result = stage(engine, schema, path, "csv", chunk_rows=500)
    assert result.rows == 20_001 and result.stats.encoding == "windows-1252"
    # With a parser process, one per pass: the first stopped when the encoding proved wrong.
    assert len(parsers) in (0, 2)
    rows = table_rows(engine, result.fields)
    assert [r[0] for r in rows] == list(range(1, 20_002))
    assert rows[0] == (1, 2, "0", "naÃ¯ve")
    assert rows[-1] == (20_001, 20_002, "late", "€uro")


def test_a_parse_error_reaches_the_caller(engine: Engine, schema: SchemaService) -> None:
    with pytest.raises(ParseError, match="source 'main': line 2: no row could be parsed"):
        stage(engine, schema, FEEDS / "all_bad.csv", "csv")


def test_a_fatal_error_mid_feed_keeps_its_message(engine: Engine, schema: SchemaService, tmp_path: Path) -> None:
    doc = "[\n" + ",\n".join(json.dumps({"id": str(i)}) for i in range(50)) + ",\n{broken}\n]"
    with pytest.raises(ParseError, match="line 52: JSON syntax error"):
        stage(engine, schema, write(tmp_path, doc, "feed.json"), "json", chunk_rows=10)


def test_a_reader_error_deep_in_the_feed_surfaces_with_its_line_and_stops_the_parser(
    engine: Engine, schema: SchemaService, tmp_path: Path, parsers: list[subprocess.Popen[bytes]]
) -> None:
    # Far beyond the first chunks, so a parser process has parsed ahead of the COPY when it fails.
    good = "".join(f"{i},{'x' * 200}\n" for i in range(30_000)).encode()
    path = write(tmp_path, b"id,t\n" + good + b"bad,\xff\n" + good, "feed.csv")
    with pytest.raises(ParseError, match=r"source 'main': line 30002: not valid utf-8 text"):
        stage(engine, schema, path, "csv", chunk_rows=2000, encoding="utf-8")
    assert all(proc.returncode is not None for proc in parsers)


def test_the_reader_ends_with_the_state_of_the_pass_that_staged(
    engine: Engine, schema: SchemaService, tmp_path: Path
) -> None:
    path = write(tmp_path, "id,t\n1,a\x00b\n2,c,extra\n3,d\n", "feed.csv")
    reader = open_reader(path, source="main", format="csv")
    result = stage_source(engine, schema, company=COMPANY, table=TABLE, reader=reader, chunk_rows=2)
    assert reader.stats is result.stats and reader.fields == ["id", "t"]
    assert (reader.stats.rows, reader.stats.malformed_lines, reader.stats.nul_removed) == (2, [3], 1)
    assert table_rows(engine, result.fields) == [(1, 2, "1", "ab"), (2, 4, "3", "d")]
