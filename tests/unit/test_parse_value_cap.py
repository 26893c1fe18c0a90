"""One cap on a value, the same in every feed format (issue #47): csv/tsv cells, JSON and JSONL values, XML text.

A row holding a longer value is malformed: skipped, counted, and named in the source's warning by line and
field; a feed left with no row fails PARSE with the same words. The cap is FIREFEED_PARSE_MAX_VALUE_CHARS.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from firefeed.config import reset_settings
from firefeed.errors import ParseError
from firefeed.pipeline.parse import _child, copy_frames, open_reader
from firefeed.pipeline.parse._chunks import Block

CAP = 1000
WHY = f"holds more than {CAP:,} characters, the most a value may hold (FIREFEED_PARSE_MAX_VALUE_CHARS)"


def feed(fmt: str, values: list[str]) -> str:
    """A feed of items `id` = 1, 2, ... with field `t` = each value; item n starts on line n + 1."""
    if fmt == "csv":
        return "id,t\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values, 1))
    if fmt == "tsv":
        return "id\tt\n" + "".join(f"{i}\t{v}\n" for i, v in enumerate(values, 1))
    if fmt == "json":
        return "[\n" + ",\n".join(f'{{"id": "{i}", "t": "{v}"}}' for i, v in enumerate(values, 1)) + "\n]\n"
    if fmt == "jsonl":
        return "\n" + "".join(f'{{"id": "{i}", "t": "{v}"}}\n' for i, v in enumerate(values, 1))
    assert fmt == "xml"
    return "<items>\n" + "".join(f"<item><id>{i}</id><t>{v}</t></item>\n" for i, v in enumerate(values, 1)) + "</items>"


def read(tmp_path: Path, fmt: str, text: str, cap: int | None = CAP) -> tuple[list[str], list[list[str]], list[str]]:
    path = tmp_path / f"feed.{fmt}"
    path.write_text(text, encoding="utf-8")
    reader = open_reader(path, source="main", format=fmt, max_value_chars=cap)
    rows = [values for _line, values in reader]
    return reader.fields, rows, reader.stats.warnings


FORMATS = ["csv", "tsv", "json", "jsonl", "xml"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_value_over_the_cap_skips_its_row_naming_line_and_field_in_every_format(tmp_path: Path, fmt: str) -> None:
    fields, rows, warnings = read(tmp_path, fmt, feed(fmt, ["a", "x" * (CAP + 1), "c"]))
    assert [dict(zip(fields, r, strict=False))["t"] for r in rows] == ["a", "c"]
    assert warnings == [f"1 malformed row skipped; the first, line 3: field 't' {WHY}"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_value_of_exactly_the_cap_is_kept(tmp_path: Path, fmt: str) -> None:
    fields, rows, warnings = read(tmp_path, fmt, feed(fmt, ["x" * CAP]))
    assert dict(zip(fields, rows[0], strict=False))["t"] == "x" * CAP
    assert warnings == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_one_item_feed_over_the_cap_fails_parse_naming_source_line_and_field(tmp_path: Path, fmt: str) -> None:
    message = f"source 'main': line 2: no row could be parsed: field 't' {WHY}"
    with pytest.raises(ParseError, match="^" + re.escape(message) + "$"):
        read(tmp_path, fmt, feed(fmt, ["x" * (CAP + 1)]))


def test_the_cap_is_the_setting_when_open_reader_is_given_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFEED_PARSE_MAX_VALUE_CHARS", "50")
    reset_settings()
    try:
        for fmt in FORMATS:
            _fields, rows, _warnings = read(tmp_path, fmt, feed(fmt, ["x" * 50, "x" * 51]), cap=None)
            assert len(rows) == 1, fmt
    finally:
        monkeypatch.delenv("FIREFEED_PARSE_MAX_VALUE_CHARS")
        reset_settings()


def test_the_default_cap_is_the_csv_cells_old_one_for_every_format(tmp_path: Path) -> None:
    for fmt in FORMATS:
        _fields, rows, warnings = read(tmp_path, fmt, feed(fmt, ["x" * 131_072, "x" * 131_073]), cap=None)
        assert len(rows) == 1, fmt
        assert "field 't' holds more than 131,072 characters" in warnings[0], fmt


def test_a_nested_json_value_and_an_array_are_named_by_their_dotted_field(tmp_path: Path) -> None:
    long = "x" * CAP
    text = f'[{{"id": "1", "a": {{"b": "{long}y"}}}}, {{"id": "2", "tags": ["{long}"]}}, {{"id": "3"}}]'
    _fields, rows, _warnings = read(tmp_path, "json", text)
    path = tmp_path / "feed.json"
    reader = open_reader(path, source="main", format="json", max_value_chars=CAP)
    assert [v[0] for _l, v in reader] == ["3"]
    assert reader.stats.malformed == 2
    assert f"field 'a.b' {WHY}" in reader.stats.warnings[0]
    assert len(rows) == 1


def test_an_xml_list_element_over_the_cap_is_named(tmp_path: Path) -> None:
    path = tmp_path / "feed.xml"
    path.write_text(f"<r><item><id>1</id><img>a</img><img>{'x' * (CAP + 1)}</img></item><item><id>2</id></item></r>")
    reader = open_reader(path, source="main", format="xml", lists={"img": ","}, max_value_chars=CAP)
    assert [v[0] for _l, v in reader] == ["2"]
    assert reader.stats.warnings == [f"1 malformed row skipped; the first, line 1: field 'img' {WHY}"]


def test_a_quoted_csv_cell_is_named_by_its_column(tmp_path: Path) -> None:
    text = f'id,a,b,c\n1,"x,y",ok,"{"q" * (CAP + 5)}"\n2,a,b,c\n'
    _fields, rows, warnings = read(tmp_path, "csv", text)
    assert rows == [["2", "a", "b", "c"]]
    assert warnings == [f"1 malformed row skipped; the first, line 2: field 'c' {WHY}"]


def test_a_csv_header_over_the_cap_is_a_parse_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="source 'main': line 1: the header cannot be read: field larger"):
        read(tmp_path, "csv", f"id,{'h' * (CAP + 1)}\n1,2\n")


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_parser_child_applies_the_readers_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    monkeypatch.setattr(_child, "PROCESS_MIN_BYTES", 0)  # every feed through the child process
    path = tmp_path / f"feed.{fmt}"
    path.write_text(feed(fmt, ["a", "x" * (CAP + 1)]), encoding="utf-8")
    reader = open_reader(path, source="main", format=fmt, max_value_chars=CAP)
    with copy_frames(reader, 100) as frames:
        blocks = [f for f in frames if isinstance(f, Block)]
    assert sum(b.rows for b in blocks) == 1
    assert reader.stats.warnings == [f"1 malformed row skipped; the first, line 3: field 't' {WHY}"]


def test_a_json_value_too_long_to_hold_is_skipped_a_chunk_at_a_time_with_the_items_after_it(tmp_path: Path) -> None:
    # 3M characters: past the first chunk the string is known to be over the cap before its end is read
    escaped = '\\"\\\\' + "x" * 3_000_000 + "\\u00e9\\\\"
    text = (
        '{"items": [{"id": "1", "t": "a"},\n'
        f'{{"id": "2", "n": {{"a": [1, "]}}"]}}, "t": "{escaped}", "m": {{"z": "}}", "y": ["["]}}}},\n'
        '{"id": "3", "t": "c"}]}\n'
    )
    fields, rows, warnings = read(tmp_path, "json", text)
    assert [dict(zip(fields, r, strict=False))["t"] for r in rows] == ["a", "c"]
    assert warnings == [f"1 malformed row skipped; the first, line 2: field 't' {WHY}"]


def test_a_huge_json_value_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "feed.json"
    with path.open("w") as f:
        f.write('[{"id": "1", "t": "')
        for _ in range(40):
            f.write("x" * (1 << 20))
        f.write('"}, {"id": "2", "t": "ok"}]')
    reader = open_reader(path, source="main", format="json", max_value_chars=131_072)
    tracemalloc.start()
    try:
        rows = [values for _line, values in reader]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows == [["2", "ok"]]
    assert peak < 16 << 20  # a few chunks; holding the 40 MB value took 120 MB and 1.4 s


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_an_array_whose_raw_control_characters_are_written_back_escaped_is_held_to_the_cap(
    tmp_path: Path, fmt: str
) -> None:
    # 200 raw U+0001 in the feed (under the cap), six characters each once the array is written as text
    array = '["' + "\x01" * 200 + '"]'
    text = f'{{"id": "1", "a": {array}}}\n{{"id": "2", "a": ["ok"]}}\n'
    path = tmp_path / f"feed.{fmt}"
    path.write_text(f"[{text.replace(chr(10), ',', 1)}]" if fmt == "json" else text, encoding="utf-8")
    reader = open_reader(path, source="main", format=fmt, max_value_chars=1000)
    assert [v for _l, v in reader] == [["2", '["ok"]']]
    assert reader.stats.warnings == [
        "1 malformed row skipped; the first, line 1: field 'a' holds more than 1,000 characters,"
        " the most a value may hold (FIREFEED_PARSE_MAX_VALUE_CHARS)"
    ]


def test_the_csv_modules_own_limit_is_given_back_after_a_pass(tmp_path: Path) -> None:
    import csv

    before = csv.field_size_limit()
    read(tmp_path, "csv", feed("csv", ["a", "x" * (CAP + 1)]))
    assert csv.field_size_limit() == before != CAP
