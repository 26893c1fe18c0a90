"""CSV and TSV reading (SPEC 8.6, 8.7): delimiters, quoting, ragged rows, header names."""

from __future__ import annotations

from pathlib import Path

import pytest

from firefeed.errors import ParseError
from firefeed.pipeline.parse import EncodingRestart, ParseStats, open_reader
from firefeed.pipeline.parse.csv_reader import detect_delimiter

FEEDS = Path(__file__).parent.parent / "fixtures" / "feeds"


def read(path: Path, fmt: str = "csv", **options: str) -> tuple[list[str], list[tuple[int, list[str]]], ParseStats]:
    reader = open_reader(path, source="main", format=fmt, **options)
    try:
        rows = list(reader)
    except EncodingRestart:
        rows = list(reader)
    return reader.fields, rows, reader.stats


def write(tmp_path: Path, data: str | bytes, name: str = "feed.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_a_utf8_bom_is_not_part_of_the_first_header() -> None:
    fields, rows, stats = read(FEEDS / "utf8_bom.csv")
    assert fields == ["id", "title"]
    assert rows == [(2, ["1", "Café"]), (3, ["2", "Ünïcödé 🔥"])]
    assert stats.encoding == "utf-8"


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("semicolon.csv", [(2, ["1", "a;b", "1,50"]), (3, ["2", "plain", "2,00"])]),
        ("pipe.csv", [(2, ["1", "a,b", "1.50"]), (3, ["2", "x|y", "2"])]),
    ],
)
def test_the_delimiter_is_the_one_the_header_uses(fixture: str, expected: list[tuple[int, list[str]]]) -> None:
    fields, rows, _ = read(FEEDS / fixture)
    assert fields == ["id", "title", "price"]
    assert rows == expected


@pytest.mark.parametrize(
    ("header", "delimiter"),
    [
        ("id", ","),
        ("a,b;c", ","),  # a tie goes to the earlier candidate
        ("a;b|c", ";"),
        ("a|b\tc", "|"),
        ("a\tb\tc,d", "\t"),
        ('"x;y;z",b', ","),  # delimiters inside quotes do not count
        ('"a,b,c";"d";e', ";"),
    ],
)
def test_delimiter_detection_counts_candidates_outside_quotes(header: str, delimiter: str) -> None:
    assert detect_delimiter(header) == delimiter


def test_a_tab_delimiter_is_detected_in_a_csv(tmp_path: Path) -> None:
    fields, rows, _ = read(write(tmp_path, "id\ttitle\n1\ta, b\n"))
    assert fields == ["id", "title"]
    assert rows == [(2, ["1", "a, b"])]


def test_tsv_uses_a_tab_with_csv_quoting() -> None:
    fields, rows, _ = read(FEEDS / "tab.tsv", "tsv")
    assert fields == ["id", "title", "note"]
    assert rows == [(2, ["1", "quoted\ttab", "x"]), (3, ["2", "plain, with comma", ""])]


def test_an_explicit_delimiter_wins_over_detection(tmp_path: Path) -> None:
    path = write(tmp_path, "id;title,x\n1;a,b\n")
    fields, rows, _ = read(path, delimiter=";")
    assert fields == ["id", "title,x"]
    assert rows == [(2, ["1", "a,b"])]
    assert read(path, delimiter="tab")[0] == ["id;title,x"]


def test_a_delimiter_setting_of_several_characters_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="one character"):
        open_reader(write(tmp_path, "a\n"), source="main", format="csv", delimiter=";;")


def test_quoted_newlines_stay_in_the_value_and_lines_count_physical_lines() -> None:
    fields, rows, _ = read(FEEDS / "quoted_newlines.csv")
    assert fields == ["id", "description", "price"]
    assert rows == [
        (2, ["1", "line one\r\nline two\nline three", "1.00"]),
        (5, ["2", 'say "hi"', "2.00"]),
        (6, ["3", "last", "3"]),
    ]


def test_longer_rows_are_malformed_and_shorter_rows_are_padded() -> None:
    fields, rows, stats = read(FEEDS / "ragged.csv")
    assert fields == ["id", "a", "b"]
    assert rows == [(2, ["1", "x", "y"]), (4, ["3", "x", ""]), (5, ["4", "x", "y"])]
    assert stats.rows == 3
    assert stats.malformed == 2
    assert stats.malformed_lines == [3, 6]
    assert stats.warnings == ["2 malformed rows skipped; the first, line 3: 4 cells but the header has 3"]


def test_only_the_first_20_malformed_lines_are_kept(tmp_path: Path) -> None:
    body = "".join(f"{i},x,y\n" for i in range(30))
    _, rows, stats = read(write(tmp_path, "id,a\n" + body + "ok,1\n"))
    assert rows == [(32, ["ok", "1"])]
    assert stats.malformed == 30
    assert stats.malformed_lines == list(range(2, 22))


def test_blank_lines_are_ignored_but_still_counted_as_lines() -> None:
    fields, rows, stats = read(FEEDS / "blank_lines.csv")
    assert fields == ["id", "title"]
    assert rows == [(5, ["1", "a"]), (8, ["2", "b"]), (10, ["3", "c"])]
    assert stats.malformed == 0


def test_an_empty_file_has_no_fields_and_no_rows() -> None:
    assert read(FEEDS / "empty.csv")[:2] == ([], [])


def test_a_file_of_blank_lines_is_empty(tmp_path: Path) -> None:
    assert read(write(tmp_path, "\n\r\n\n"))[:2] == ([], [])


def test_a_line_with_a_quoted_empty_field_is_a_record_not_a_blank_line(tmp_path: Path) -> None:
    # SPEC 8.22: `""` alone is a record (padded); a line of white space is not, and is not counted.
    _, rows, stats = read(write(tmp_path, 'id,t\n1,a\n""\n \t \n\n" "\n"" \n"\n"\n2,b\n'))
    assert rows == [
        (2, ["1", "a"]),
        (3, ["", ""]),
        (6, [" ", ""]),
        (7, [" ", ""]),
        (8, ["\n", ""]),
        (10, ["2", "b"]),
    ]
    assert (stats.rows, stats.malformed) == (6, 0)


def test_in_a_one_column_feed_blank_lines_are_still_blank(tmp_path: Path) -> None:
    _, rows, stats = read(write(tmp_path, 'id\n1\n   \n\u00a0\n""\n2\n'))
    assert rows == [(2, ["1"]), (5, [""]), (6, ["2"])]
    assert (stats.rows, stats.malformed) == (3, 0)


def test_in_a_tsv_a_line_of_tabs_is_blank_and_quoted_empty_fields_are_a_record(tmp_path: Path) -> None:
    path = write(tmp_path, 'id\tt\n1\ta\n\t\n \t \t \n""\t""\n\t""\t\n2\tb\n', "feed.tsv")
    _, rows, stats = read(path, "tsv")
    # The line of three cells holds a quoted field: a record, and one too wide.
    assert rows == [(2, ["1", "a"]), (5, ["", ""]), (7, ["2", "b"])]
    assert (stats.rows, stats.malformed, stats.malformed_lines) == (3, 1, [6])


def test_a_quoted_empty_header_line_is_the_header(tmp_path: Path) -> None:
    fields, rows, _ = read(write(tmp_path, '\n  \n""\n1\n'))
    assert fields == ["column_1"]
    assert rows == [(4, ["1"])]


def test_blank_lines_far_apart_in_a_long_feed_are_told_from_quoted_ones(tmp_path: Path) -> None:
    # Beyond the raw lines the reader keeps back: each check still sees its own line.
    body = "".join(
        f"{i},x\n" + ('""\n' if i % 3000 == 0 else "  \n" if i % 1000 == 0 else "") for i in range(1, 20_001)
    )
    _, rows, stats = read(write(tmp_path, "id,t\n" + body))
    assert stats.rows == 20_000 + 6
    assert sum(1 for _, values in rows if values == ["", ""]) == 6


def test_a_header_only_file_has_fields_and_no_rows() -> None:
    assert read(FEEDS / "header_only.csv")[:2] == (["id", "title", "price"], [])


def test_repeated_headers_take_the_lowest_free_suffix_left_to_right_with_a_warning() -> None:
    fields, rows, stats = read(FEEDS / "duplicate_headers.csv")
    # SPEC 8.23: names are taken left to right; `color_2` was taken by the second `color` first.
    assert fields == ["id", "color", "color_2", "color_2_2", "column_5", "size", "color_3"]
    assert rows == [(2, ["1", "red", "blue", "green", "x", "M", "black"])]
    assert "repeated header 'color' renamed to 'color_2'" in stats.warnings
    assert "repeated header 'color_2' renamed to 'color_2_2'" in stats.warnings
    assert "repeated header 'color' renamed to 'color_3'" in stats.warnings
    assert any("column_5" in w for w in stats.warnings)


@pytest.mark.parametrize(
    ("header", "fields"),
    [
        ("color,color,color_2", ["color", "color_2", "color_2_2"]),
        ("color_2,color,color", ["color_2", "color", "color_3"]),
        ("a,a,a,a_2,a_3", ["a", "a_2", "a_3", "a_2_2", "a_3_2"]),
        ("column_2,", ["column_2", "column_2_2"]),
        (",column_1", ["column_1", "column_1_2"]),
    ],
)
def test_header_names_are_taken_in_order_like_xml_names(tmp_path: Path, header: str, fields: list[str]) -> None:
    assert read(write(tmp_path, header + "\n"))[0] == fields


def test_nul_characters_are_removed_from_names_and_values_and_counted() -> None:
    fields, rows, stats = read(FEEDS / "nul.csv")
    assert fields == ["id", "title"]
    assert rows == [(2, ["1", "ab"]), (3, ["2", "c"])]
    assert stats.nul_removed == 4


def test_hostile_header_names_are_kept_exactly() -> None:
    fields, rows, _ = read(FEEDS / "hostile_headers.csv")
    assert fields[1:7] == ['we"ird', "it's", "semi;colon", "select", "drop table x;--", "naïve 日本 🔥"]
    assert fields[7] == "x" * 200
    assert fields[8:] == ["Mixed Case", "with space", "_ff_ord", '"quoted"']
    assert rows == [(2, [f"v{i}" for i in range(12)])]


def test_white_space_in_values_is_kept(tmp_path: Path) -> None:
    _, rows, _ = read(write(tmp_path, "id,t\n 1 ,  a b  \n"))
    assert rows == [(2, [" 1 ", "  a b  "])]


def test_crlf_and_cr_line_endings_are_lines(tmp_path: Path) -> None:
    _, rows, _ = read(write(tmp_path, "id,t\r\n1,a\r\n2,b\r3,c"))
    assert rows == [(2, ["1", "a"]), (3, ["2", "b"]), (4, ["3", "c"])]


def test_when_no_row_parses_the_error_names_the_first_bad_line() -> None:
    with pytest.raises(ParseError, match=r"source 'main': line 2: no row could be parsed: 3 cells"):
        read(FEEDS / "all_bad.csv")


def test_a_cell_over_the_size_limit_is_a_malformed_row_not_a_crash(tmp_path: Path) -> None:
    huge = "x" * 200_000
    _, rows, stats = read(write(tmp_path, f"id,t\n1,{huge}\n2,ok\n"))
    assert rows == [(3, ["2", "ok"])]
    assert stats.malformed_lines == [2]
    assert stats.warnings == [
        "1 malformed row skipped; the first, line 2: field 't' holds more than 131,072 characters,"
        " the most a value may hold (FIREFEED_PARSE_MAX_VALUE_CHARS)"
    ]


def test_a_long_feed_streams_every_row(tmp_path: Path) -> None:
    body = "".join(f'{i},"v{i},\n{i}"\n' for i in range(20_000))
    _fields, rows, stats = read(write(tmp_path, "id,v\n" + body))
    assert len(rows) == stats.rows == 20_000
    assert rows[-1] == (2 + 2 * 19_999, ["19999", "v19999,\n19999"])


def test_an_unknown_format_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="format must be one of"):
        open_reader(write(tmp_path, "a\n"), source="main", format="yaml")


def test_a_missing_file_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="cannot read the feed file"):
        open_reader(tmp_path / "nope.csv", source="main", format="csv")


def test_a_reader_can_be_iterated_twice_with_the_same_result() -> None:
    reader = open_reader(FEEDS / "ragged.csv", source="main", format="csv")
    first = list(reader)
    assert list(reader) == first
    assert reader.stats.malformed == 2
