"""write_export on a real Postgres: every format, hostile names and values, order, gzip, atomicity."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import get_engine, raw_connection
from firefeed.errors import ExportError
from firefeed.export import ExportResult, resolve_export_path, write_export
from firefeed.export._copy import in_physical_order, render
from firefeed.export.google_xml import GOOGLE_NS, element_names, xml_name
from firefeed.export.select import Piece
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService
from firefeed.spec.model import ExportSpec, ProjectSpec

pytestmark = pytest.mark.integration

COMPANY = "exptest"
SCHEMA = company_schema(COMPANY)
LONG = "ü" + "x" * 198 + "é"  # 200 characters, over the 63-byte identifier limit
FIELDS = [
    "id",
    "title",
    'say "hi"',
    "semi;colon",
    "ünï 🚀",
    LONG,
    "color",
    "color_2",
    "select",
    "50% off",
    "%s",
    "availability",
    "price",
]
HOSTILE = [
    "",
    '"quoted"',
    "a,b;c",
    "line1\nline2",
    "cr\r\nlf",
    "tab\there",
    "back\\slash\\",
    "<&>",
    "ctl\x01\x02\x0b\x1fend",
    "emoji 🔥👍🏽",
    "\\N",
    "\\.",
    " lead and trail ",
    "]]>",
    "nc\ufffe\uffffx",
    "quote'single",
    "\x07",
    "日本語",
    "{{not a template}}",
]


def _items() -> list[dict[str, str]]:
    """Five items; every hostile value appears in every column somewhere."""
    items = []
    for n in range(5):
        item = {}
        for i, field in enumerate(FIELDS):
            item[field] = HOSTILE[(n * len(FIELDS) + i) % len(HOSTILE)]
        item["id"] = f"id-{n}"
        item["availability"] = "discontinued" if n == 2 else "in stock"
        item["price"] = f"{n}.99"
        items.append(item)
    return items


ITEMS = _items()


def _create(engine: Engine, table: str, rows: Sequence[tuple[int, dict[str, str]]]) -> None:
    service = SchemaService(engine)
    service.create_company_schema(COMPANY)
    service.drop_table(COMPANY, table)
    service.create_project_table(COMPANY, table)
    service.add_columns(COMPANY, table, [column_for_field(f) for f in FIELDS])
    cols = [ident(ORD), ident(KEY), ident(SRC)] + [ident(column_for_field(f)) for f in FIELDS]
    insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        ident(SCHEMA, table), sql.SQL(", ").join(cols), sql.SQL(", ").join([sql.Placeholder()] * len(cols))
    )
    with raw_connection(engine) as conn, conn.cursor() as cur:
        for ord_, item in rows:  # inserted in this physical order
            # render(): plain execute() would read the `%` in "50% off" as a placeholder
            values = (ord_, item["id"], 0, *(item[f] for f in FIELDS))
            cur.execute(render(Piece(insert, values), cur))


@pytest.fixture(scope="module")
def db(database_url: str) -> Iterator[Engine]:
    engine = get_engine(database_url)
    _create(engine, "items_ordered", [(n + 1, item) for n, item in enumerate(ITEMS)])
    # Physically shuffled: the export must still follow _ff_ord.
    _create(engine, "items_shuffled", [(n + 1, ITEMS[n]) for n in (3, 0, 4, 2, 1)])
    yield engine


def spec(**export: Any) -> ExportSpec:
    raw = {
        "company": COMPANY,
        "project": "p1",
        "sources": [{"name": "main", "url": "x.csv"}],
        "exports": [{"name": "e", "path": "out.dat", **export}],
    }
    return ProjectSpec.model_validate(raw).exports[0]


def run(
    db: Engine, tmp_path: Path, export: ExportSpec, table: str = "items_ordered", **kw: Any
) -> tuple[ExportResult, bytes]:
    dest = resolve_export_path(tmp_path, COMPANY, "p1", export.path, gzip=export.gzip)
    result = write_export(db, schema=SCHEMA, table=table, fields=FIELDS, export=export, dest=dest, **kw)
    data = dest.read_bytes()
    assert result.bytes == len(data)
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.path == str(dest)
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith(".")] == []
    return result, data


def xml_value(value: str) -> str:
    return "".join(ch for ch in value if ch in "\t\n\r" or (ord(ch) >= 32 and ch not in "\ufffe\uffff"))


def parse_delimited(data: bytes, delimiter: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline=""), delimiter=delimiter))


def expected_rows(items: Sequence[dict[str, str]] = ITEMS) -> list[list[str]]:
    return [[item[f] for f in FIELDS] for item in items]


# -- formats ---------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t")])
def test_delimited_round_trips_hostile_names_and_values(db: Engine, tmp_path: Path, fmt: str, delimiter: str) -> None:
    result, data = run(db, tmp_path, spec(format=fmt))
    rows = parse_delimited(data, delimiter)
    assert rows[0] == FIELDS
    assert rows[1:] == expected_rows()
    assert result.rows == len(ITEMS)


def test_csv_writes_empty_values_as_nothing_and_quotes_like_python(db: Engine, tmp_path: Path) -> None:
    _, data = run(db, tmp_path, spec(format="csv"))
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([FIELDS, *expected_rows()])
    assert data.decode("utf-8") == buffer.getvalue()  # so "" is written as nothing, not `""`


def test_a_one_column_csv_keeps_empty_rows_visible(db: Engine, tmp_path: Path) -> None:
    _, data = run(db, tmp_path, spec(format="csv", fields={"only": "nothing here"}))
    assert data == b'"only"\n' + b'""\n' * len(ITEMS)
    assert parse_delimited(data, ",") == [["only"]] + [[""]] * len(ITEMS)


def test_json_is_one_array_of_string_objects_in_order(db: Engine, tmp_path: Path) -> None:
    result, data = run(db, tmp_path, spec(format="json"))
    parsed = json.loads(data.decode("utf-8"))
    assert [list(obj.keys()) for obj in parsed] == [FIELDS] * len(ITEMS)
    assert [list(obj.values()) for obj in parsed] == expected_rows()
    assert result.rows == len(ITEMS)


def test_jsonl_is_one_object_per_line(db: Engine, tmp_path: Path) -> None:
    _, data = run(db, tmp_path, spec(format="jsonl"))
    lines = data.decode("utf-8").split("\n")
    assert lines[-1] == ""
    parsed = [json.loads(line) for line in lines[:-1]]
    assert [list(o.items()) for o in parsed] == [list(zip(FIELDS, r, strict=True)) for r in expected_rows()]


def test_json_of_no_items_is_an_empty_array(db: Engine, tmp_path: Path) -> None:
    never = {"field": "id", "op": "eq", "value": "no such id"}
    _, data = run(db, tmp_path, spec(format="json", where=never))
    assert json.loads(data) == []
    _, data = run(db, tmp_path, spec(format="jsonl", where=never))
    assert data == b""


def test_google_xml_parses_and_round_trips_values(db: Engine, tmp_path: Path) -> None:
    result, data = run(db, tmp_path, spec(format="google-xml"), title="Shoes & <Boots>")
    root = etree.fromstring(data)
    assert root.tag == "rss" and root.get("version") == "2.0"
    assert root.nsmap["g"] == GOOGLE_NS
    channel = root.find("channel")
    assert channel is not None
    assert channel.findtext("title") == "Shoes & <Boots>"
    names = element_names(FIELDS)
    items = channel.findall("item")
    assert len(items) == len(ITEMS) == result.rows
    for element, item in zip(items, ITEMS, strict=True):
        got = [(etree.QName(child).localname, child.text or "") for child in element]
        want = [(name, xml_value(item[f])) for name, f in zip(names, FIELDS, strict=True) if xml_value(item[f]) != ""]
        assert got == want


def test_xml_names_are_made_valid_and_unique() -> None:
    assert xml_name("unit price") == "unit_price"
    assert xml_name("2nd") == "_2nd"
    assert xml_name("a:b") == "a_b"
    assert xml_name("") == "_"
    assert xml_name("ünï 🚀") == "ünï_🚀"
    assert element_names(["a b", "a_b", "a b", "a_b_2"]) == ["a_b", "a_b_2", "a_b_3", "a_b_2_2"]


# -- fields, where, order ----------------------------------------------------


def test_fields_map_names_missing_fields_and_templates(db: Engine, tmp_path: Path) -> None:
    fields = {
        "ID": "id",
        "price": "{price} EUR",
        "ghost": "no_such_field",
        "braces": "{{literal}}",
        "mixed": "{title}|{nope}|{50% off}",
        "long " + LONG: LONG,
        "50%": "%s",
    }
    _, data = run(db, tmp_path, spec(format="csv", fields=fields))
    rows = parse_delimited(data, ",")
    assert rows[0] == list(fields)
    assert rows[1:] == [
        [i["id"], f"{i['price']} EUR", "", "{literal}", f"{i['title']}||{i['50% off']}", i[LONG], i["%s"]]
        for i in ITEMS
    ]


def test_where_filters_items_after_rules(db: Engine, tmp_path: Path) -> None:
    where = {"field": "availability", "op": "ne", "value": "discontinued"}
    result, data = run(db, tmp_path, spec(format="jsonl", fields={"id": "id"}, where=where))
    assert [json.loads(line)["id"] for line in data.splitlines()] == ["id-0", "id-1", "id-3", "id-4"]
    assert result.rows == 4


def test_where_on_a_hostile_field_name(db: Engine, tmp_path: Path) -> None:
    where = {
        "any": [
            {"field": "50% off", "op": "eq", "value": ITEMS[1]["50% off"]},
            {"field": "id", "op": "eq", "value": "id-4"},
        ]
    }
    _, data = run(db, tmp_path, spec(format="jsonl", fields={"id": "id"}, where=where))
    ids = [json.loads(line)["id"] for line in data.splitlines()]
    assert ids == [i["id"] for i in ITEMS if i["50% off"] == ITEMS[1]["50% off"] or i["id"] == "id-4"]


def _drop_order_index(engine: Engine, table: str) -> None:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(ident(SCHEMA, f"ix_{table}_ord")))


@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize("fmt", ["csv", "json", "google-xml"])
def test_items_come_out_in_ff_ord_order_whatever_the_physical_order(
    db: Engine, tmp_path: Path, fmt: str, indexed: bool
) -> None:
    """Out of physical order, items are sorted, or read through an `_ff_ord` index (as after chunked rules)."""
    _, ordered = run(db, tmp_path, spec(format=fmt, path="a.out"))
    if indexed:
        SchemaService(db).index_order(COMPANY, "items_shuffled")
    try:
        _, shuffled = run(db, tmp_path, spec(format=fmt, path="b.out"), table="items_shuffled")
    finally:
        _drop_order_index(db, "items_shuffled")
    assert shuffled == ordered


def test_physical_order_check(db: Engine) -> None:
    with raw_connection(db) as conn, conn.cursor() as cur:
        assert in_physical_order(cur, SCHEMA, "items_ordered")
        assert not in_physical_order(cur, SCHEMA, "items_shuffled")


# -- gzip ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "google-xml"])
def test_gzip_is_the_same_bytes_compressed_and_deterministic(db: Engine, tmp_path: Path, fmt: str) -> None:
    _, plain = run(db, tmp_path, spec(format=fmt, path="feed"))
    first, packed = run(db, tmp_path, spec(format=fmt, path="feed", gzip=True))
    assert first.path.endswith("feed.gz")
    assert gzip.decompress(packed) == plain
    assert packed[3] & 0x08 == 0  # no file name in the header
    assert packed[4:8] == b"\0\0\0\0"  # mtime 0
    second, _ = run(db, tmp_path, spec(format=fmt, path="feed", gzip=True))
    assert second.sha256 == first.sha256


# -- atomicity ---------------------------------------------------------------


@pytest.fixture()
def failing_view(db: Engine) -> Iterator[str]:
    """A view whose third item raises mid-COPY, after earlier rows were already streamed."""
    cols = [ident(column_for_field(f)) for f in FIELDS]
    select = [ident(ORD), ident(KEY), ident(SRC)] + [
        sql.SQL("CASE WHEN {o} = 3 THEN (1 / ({o} - 3))::text ELSE {c} END AS {c}").format(o=ident(ORD), c=c)
        if f == "title"
        else c
        for f, c in zip(FIELDS, cols, strict=True)
    ]
    with raw_connection(db) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("CREATE OR REPLACE VIEW {} AS SELECT {} FROM {}").format(
                ident(SCHEMA, "items_failing"), sql.SQL(", ").join(select), ident(SCHEMA, "items_ordered")
            )
        )
    yield "items_failing"
    with raw_connection(db) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("DROP VIEW {}").format(ident(SCHEMA, "items_failing")))


@pytest.mark.parametrize("gz", [False, True])
def test_a_failure_midway_leaves_the_previous_file_untouched(
    db: Engine, tmp_path: Path, failing_view: str, gz: bool
) -> None:
    export = spec(format="csv", gzip=gz)
    _, before = run(db, tmp_path, export)
    dest = resolve_export_path(tmp_path, COMPANY, "p1", export.path, gzip=gz)
    with pytest.raises(ExportError, match="division by zero"):
        write_export(db, schema=SCHEMA, table=failing_view, fields=FIELDS, export=export, dest=dest)
    assert dest.read_bytes() == before
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]


def test_a_missing_table_is_an_export_error_and_writes_nothing(db: Engine, tmp_path: Path) -> None:
    dest = resolve_export_path(tmp_path, COMPANY, "p1", "new.csv")
    with pytest.raises(ExportError):
        write_export(db, schema=SCHEMA, table="no_such_table", fields=FIELDS, export=spec(format="csv"), dest=dest)
    assert list(dest.parent.iterdir()) == []


def test_folders_are_created_and_the_file_is_replaced(db: Engine, tmp_path: Path) -> None:
    export = spec(format="jsonl", path="deep/er/feed.jsonl", fields={"id": "id"})
    dest = resolve_export_path(tmp_path, COMPANY, "p1", export.path)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"old contents")
    dest.chmod(0o640)
    result, data = run(db, tmp_path, export)
    assert data.startswith(b'{"id":"id-0"}\n')
    assert dest.stat().st_mode & 0o777 == 0o640
    assert result.name == "e"


# -- volume ------------------------------------------------------------------

BIG_FIELDS = ["id", "body", "note"]
BIG_ROWS = 4000


@pytest.fixture(scope="module")
def big_table(db: Engine) -> str:
    """~3 MB of items, so lines cross the writers' 1 MB batches; some lines need COPY quoting."""
    table = "items_big"
    service = SchemaService(db)
    service.drop_table(COMPANY, table)
    service.create_project_table(COMPANY, table)
    service.add_columns(COMPANY, table, BIG_FIELDS)
    with raw_connection(db) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'k' || g, 0, 'k' || g, repeat('<b&a\"r> ', 90) || g,"
                " CASE WHEN g %% 7 = 0 THEN E'two\\nlines\\r' WHEN g %% 11 = 0 THEN E'ctl\\x01\\x02\\x1f'"
                " WHEN g %% 13 = 0 THEN '' ELSE 'plain' END FROM generate_series(1, %s) g"
            ).format(ident(SCHEMA, table)),
            (BIG_ROWS,),
        )
    return table


def big_expected() -> list[list[str]]:
    rows = []
    for g in range(1, BIG_ROWS + 1):
        note = "two\nlines\r" if g % 7 == 0 else "ctl\x01\x02\x1f" if g % 11 == 0 else "" if g % 13 == 0 else "plain"
        rows.append([f"k{g}", '<b&a"r> ' * 90 + str(g), note])
    return rows


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "google-xml"])
def test_many_items_keep_order_and_values_across_batches(db: Engine, tmp_path: Path, big_table: str, fmt: str) -> None:
    export = spec(format=fmt)
    dest = resolve_export_path(tmp_path, COMPANY, "p1", export.path)
    result = write_export(db, schema=SCHEMA, table=big_table, fields=BIG_FIELDS, export=export, dest=dest)
    data = dest.read_bytes()
    assert result.rows == BIG_ROWS and result.bytes == len(data) > 3_000_000
    expected = big_expected()
    if fmt == "csv":
        assert parse_delimited(data, ",") == [BIG_FIELDS, *expected]
    elif fmt == "json":
        assert [list(o.values()) for o in json.loads(data)] == expected
    elif fmt == "jsonl":
        assert [list(json.loads(line).values()) for line in data.splitlines()] == expected
    else:
        items = etree.fromstring(data).find("channel").findall("item")
        got = [[child.text for child in item] for item in items]
        assert got == [[v for v in map(xml_value, row) if v] for row in expected]


@pytest.mark.parametrize("where", [None, {"field": "note", "op": "ne", "value": "plain"}])
def test_google_xml_groups_of_pages_and_sorted_groups_give_the_same_bytes(
    db: Engine, tmp_path: Path, big_table: str, monkeypatch: pytest.MonkeyPatch, where: dict[str, str] | None
) -> None:
    """Items in order are grouped by runs of heap pages, others read by position (sorted, or through their
    `_ff_ord` index): the file is the same."""
    import firefeed.export._copy as copy_module

    extra = {"where": where} if where else {}
    export = spec(format="google-xml", **extra)
    expected = [r for r in big_expected() if where is None or r[2] != "plain"]
    outputs = []
    cases = (("pages", 32, True, False), ("one page", 1, True, False), ("sorted", 32, False, False))
    for case, pages, ordered, indexed in (*cases, ("indexed", 32, False, True)):
        monkeypatch.setattr(copy_module, "_GROUP_PAGES", pages)
        if not ordered:
            monkeypatch.setattr(copy_module, "in_physical_order", lambda *args: False)
        if indexed:  # groups read through the `_ff_ord` index, as after chunked rules
            SchemaService(db).index_order(COMPANY, big_table)
        dest = resolve_export_path(tmp_path / case.replace(" ", "_"), COMPANY, "p1", export.path)
        result = write_export(db, schema=SCHEMA, table=big_table, fields=BIG_FIELDS, export=export, dest=dest)
        data = dest.read_bytes()
        assert result.rows == len(expected) and result.sha256 == hashlib.sha256(data).hexdigest()
        items = etree.fromstring(data).find("channel").findall("item")
        assert [[child.text for child in item] for item in items] == [
            [v for v in map(xml_value, r) if v] for r in expected
        ]
        outputs.append(data)
    _drop_order_index(db, big_table)
    assert outputs[0] == outputs[1] == outputs[2] == outputs[3]


def test_google_xml_groups_out_of_order_are_refused() -> None:
    """The groups' positions prove item order; a plan that broke it fails the export instead of shuffling it."""
    from firefeed.export.google_xml import _FILE_HEADER, _SIGNATURE, XmlGroups

    def row(position: int, line: bytes) -> bytes:
        return struct.pack(">hiqiqi", 3, 8, position, 8, 1, len(line)) + line

    got: list[bytes] = []

    class Collect:
        def write(self, data: bytes, /) -> int:
            got.append(data)
            return len(data)

    groups = XmlGroups(Collect())
    groups.write(_SIGNATURE + bytes(_FILE_HEADER - len(_SIGNATURE)) + row(32, b"\xf8item\xf9\xf8/item\xf9\xfa"))
    assert got == [b"<item></item>\n"] and groups.items == 1
    with pytest.raises(ValueError, match="out of order"):
        groups.write(row(0, b"\xf8item\xf9\xf8/item\xf9\xfa"))
