"""JSON and JSON Lines (SPEC 8.4): values as text, items found by item_path, streamed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firefeed.errors import ParseError
from firefeed.pipeline.parse import ParseStats, json_reader, open_reader

FEEDS = Path(__file__).parent.parent / "fixtures" / "feeds"


def read(path: Path, fmt: str = "json", **options: str) -> tuple[list[str], list[tuple[int, list[str]]], ParseStats]:
    reader = open_reader(path, source="main", format=fmt, **options)
    rows = list(reader)
    return reader.fields, rows, reader.stats


def write(tmp_path: Path, data: str, name: str = "feed.json") -> Path:
    path = tmp_path / name
    path.write_text(data, encoding="utf-8")
    return path


def as_dicts(fields: list[str], rows: list[tuple[int, list[str]]]) -> list[dict[str, str]]:
    return [dict(zip(fields, values, strict=False)) for _, values in rows]


def test_values_become_text_as_written() -> None:
    fields, rows, _stats = read(FEEDS / "typed.json")
    first = as_dicts(fields, rows)[0]
    assert first["price"] == "1.50"
    assert first["qty"] == "10"
    assert first["big"] == "12345678901234567890"
    assert first["exp"] == "1E+3"
    assert first["neg"] == "-0.0"
    assert (first["active"], first["gone"], first["note"], first["empty"]) == ("true", "false", "", "")
    assert first["sizes"] == '["S",1.50,true,null,{"a":2.0}]'
    assert first["text"] == "café 🔥 tab\there"


def test_nested_objects_flatten_with_dots() -> None:
    fields, rows, _ = read(FEEDS / "typed.json")
    first = as_dicts(fields, rows)[0]
    assert (first["shipping.price"], first["shipping.country"], first["shipping.box.w"]) == ("4.90", "IT", "1")


def test_auto_item_path_takes_the_first_array_of_objects_in_a_top_level_object() -> None:
    # "tags" is an array of strings and "meta" an object: both are skipped.
    fields, rows, _stats = read(FEEDS / "typed.json")
    assert [values[0] for _, values in rows] == ["1", "2"]
    assert "generated" not in fields and "meta.generated" not in fields


def test_fields_grow_and_earlier_rows_stay_as_long_as_the_fields_were() -> None:
    fields, rows, _ = read(FEEDS / "typed.json")
    assert fields[-1] == "extra"
    assert len(rows[0][1]) == len(fields) - 1
    assert rows[1][1][0] == "2" and rows[1][1][-1] == "new field"


def test_an_item_that_is_not_an_object_is_malformed_with_its_line() -> None:
    _, rows, stats = read(FEEDS / "typed.json")
    assert [line for line, _ in rows] == [4, 8]
    assert stats.malformed == 1
    assert stats.malformed_lines == [9]


def test_a_top_level_array_is_the_items(tmp_path: Path) -> None:
    fields, rows, _ = read(write(tmp_path, '[\n{"id": 1},\n{"id": 2, "t": "x"}\n]'))
    assert fields == ["id", "t"]
    assert rows == [(2, ["1"]), (3, ["2", "x"])]


def test_an_explicit_dotted_item_path_is_followed(tmp_path: Path) -> None:
    doc = {"data": {"other": [{"id": "no"}], "products": [{"id": "yes"}]}, "products": [{"id": "top"}]}
    path = write(tmp_path, json.dumps(doc))
    assert read(path, item_path="data.products")[1] == [(1, ["yes"])]
    assert read(path)[1] == [(1, ["top"])]


def test_a_missing_item_path_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, '{"data": {"x": []}}')
    with pytest.raises(ParseError, match=r"item_path 'data\.products' not found"):
        read(path, item_path="data.products")
    with pytest.raises(ParseError, match="'x' is not an object"):
        read(path, item_path="data.x.y")


def test_an_object_without_an_array_of_objects_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="no array of objects"):
        read(write(tmp_path, '{"id": "1", "tags": ["a"]}'))


@pytest.mark.parametrize("doc", ["", "  \n", "[]", '{"products": []}', "[\n]"])
def test_an_empty_feed_has_no_rows(tmp_path: Path, doc: str) -> None:
    assert read(write(tmp_path, doc))[:2] == ([], [])


@pytest.mark.parametrize(
    ("doc", "line"),
    [
        ('[\n{"id": 1},\n{"id": 2,,}\n]', 3),
        ('[\n{"id": 1}\n{"id": 2}\n]', 3),
        ('[\n{"id": 1},\n{"id": "unterminated', 3),
        ('[\n{"id": 1},\n', 3),
        ("hello", 1),
        ("\n\n42", 3),
    ],
)
def test_a_syntax_error_is_fatal_and_names_its_line(tmp_path: Path, doc: str, line: int) -> None:
    with pytest.raises(ParseError, match=rf"source 'main': line {line}: "):
        read(write(tmp_path, doc))


def test_a_trailing_comma_is_forgiven(tmp_path: Path) -> None:
    assert read(write(tmp_path, '[{"id": 1},]'))[1] == [(1, ["1"])]


def test_deep_nesting_is_a_parse_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="nested too deeply"):
        read(write(tmp_path, "[" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "]"))


def test_nul_escapes_are_removed_and_lone_surrogates_replaced(tmp_path: Path) -> None:
    fields, rows, stats = read(write(tmp_path, r'[{"i\u0000d": "a\u0000b", "t": "x\ud800y"}]'))
    assert fields == ["id", "t"]
    assert rows == [(1, ["ab", "x\ufffdy"])]
    assert stats.nul_removed == 2


def test_items_are_streamed_across_buffer_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = [{"id": str(i), "price": 1.5 + i, "n": {"a": [i, "x" * (i % 7)]}, "b": i % 2 == 0} for i in range(300)]
    doc = '{"meta": {"skip": [1, 2, {"x": 12345}]}, "items": [\n' + ",\n".join(json.dumps(i) for i in items) + "\n]}"
    path = write(tmp_path, doc)
    expected = read(path)
    # A tiny buffer cuts every token, string and number somewhere.
    monkeypatch.setattr(json_reader, "CHUNK_CHARS", 3)
    assert read(path) == expected
    assert len(expected[1]) == 300
    assert expected[0] == ["id", "price", "n.a", "b"]
    assert expected[1][299] == (301, ["299", "300.5", '[299,"xxxxx"]', "false"])


def test_jsonl_reads_one_object_per_line_and_counts_bad_lines() -> None:
    fields, rows, stats = read(FEEDS / "bad_line.jsonl", "jsonl")
    assert fields == ["id", "t", "n"]
    assert rows == [(1, ["1", "a"]), (4, ["3", "c", "1.10"])]
    assert stats.malformed == 2
    assert stats.malformed_lines == [3, 6]


def test_jsonl_where_nothing_parses_names_the_first_bad_line() -> None:
    with pytest.raises(ParseError, match="line 1: no row could be parsed: JSON syntax error"):
        read(FEEDS / "all_bad.jsonl", "jsonl")


def test_jsonl_lines_end_only_at_newline(tmp_path: Path) -> None:
    path = write(tmp_path, '{"t": "a\u2028b\u0085c\rd"}\n', "feed.jsonl")
    assert read(path, "jsonl")[1] == [(1, ["a\u2028b\u0085c\rd"])]
