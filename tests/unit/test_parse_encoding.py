"""Encodings (SPEC 8.6): BOMs, UTF-8, the windows-1252 fallback, explicit codecs, the restart."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from firefeed.errors import ParseError
from firefeed.pipeline.parse import EncodingRestart, open_reader
from firefeed.pipeline.parse._encoding import decode_windows_1252

FEEDS = Path(__file__).parent.parent / "fixtures" / "feeds"


def write(tmp_path: Path, data: bytes, name: str = "feed.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def rows_of(path: Path, fmt: str = "csv", **options: str) -> list[tuple[int, list[str]]]:
    reader = open_reader(path, source="main", format=fmt, **options)
    try:
        return list(reader)
    except EncodingRestart:
        return list(reader)


def test_windows_1252_is_read_as_whatwg_does_when_the_bytes_are_not_utf8() -> None:
    reader = open_reader(FEEDS / "cp1252.csv", source="main", format="csv")
    rows = list(reader)
    # 0x81, 0x8D, 0x8F, 0x90, 0x9D are undefined in Python's cp1252: WHATWG maps them to C1 controls.
    assert rows[0] == (2, ["1", "café € \x81 \x8d \x8f \x90 \x9d Ÿ"])
    assert reader.stats.encoding == "windows-1252"


def test_the_windows_1252_table_is_cp1252_plus_five_control_characters() -> None:
    every_byte = bytes(range(256))
    decoded = decode_windows_1252(every_byte)
    assert len(decoded) == 256
    for byte, char in zip(every_byte, decoded, strict=True):
        if byte in (0x81, 0x8D, 0x8F, 0x90, 0x9D):
            assert char == chr(byte)
        else:
            assert char == bytes([byte]).decode("cp1252")


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_a_utf16_or_utf32_bom_sets_the_encoding(tmp_path: Path, codec: str) -> None:
    bom = {
        "utf-16-le": codecs.BOM_UTF16_LE,
        "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE,
        "utf-32-be": codecs.BOM_UTF32_BE,
    }[codec]
    path = write(tmp_path, bom + "id,t\r\n1,Grüße 🔥\r\n".encode(codec))
    reader = open_reader(path, source="main", format="csv")
    assert list(reader) == [(2, ["1", "Grüße 🔥"])]
    assert reader.fields == ["id", "t"]
    assert reader.stats.encoding == codec


def test_the_utf16_fixture_reads_with_its_bom() -> None:
    assert rows_of(FEEDS / "utf16.csv") == [(2, ["1", "Grüße 🔥"]), (3, ["2", "日本"])]


def test_invalid_utf8_in_the_first_chunk_switches_before_any_row(tmp_path: Path) -> None:
    reader = open_reader(write(tmp_path, b"id,t\n1,caf\xe9\n"), source="main", format="csv")
    assert list(reader) == [(2, ["1", "café"])]


def test_invalid_utf8_after_rows_were_yielded_restarts_the_reader_as_windows_1252(tmp_path: Path) -> None:
    good = "".join(f"{i},naïve\n" for i in range(20_000)).encode()
    path = write(tmp_path, b"id,t\n" + good + b"late,\x80uro\n")
    reader = open_reader(path, source="main", format="csv")
    seen = []
    with pytest.raises(EncodingRestart):
        for row in reader:
            seen.append(row)
    assert seen, "rows were yielded before the bad byte"
    rows = list(reader)
    assert reader.stats.encoding == "windows-1252"
    assert len(rows) == 20_001
    # The whole file is now windows-1252, including the UTF-8 that came first.
    assert rows[0] == (2, ["0", "naÃ¯ve"])
    assert rows[-1] == (20_002, ["late", "€uro"])


@pytest.mark.parametrize("fmt", ["json", "jsonl", "xml"])
def test_every_format_falls_back_to_windows_1252(tmp_path: Path, fmt: str) -> None:
    data = {
        "json": b'[{"id": "1", "t": "caf\xe9"}]',
        "jsonl": b'{"id": "1", "t": "caf\xe9"}\n',
        "xml": b"<items><item><id>1</id><t>caf\xe9</t></item><item><id>2</id><t>x</t></item></items>",
    }[fmt]
    assert rows_of(write(tmp_path, data, f"feed.{fmt}"), fmt)[0][1] == ["1", "café"]


def test_an_explicit_codec_is_used(tmp_path: Path) -> None:
    path = write(tmp_path, "id,t\n1,Grüße\n".encode("latin-1"))
    assert rows_of(path, encoding="latin-1") == [(2, ["1", "Grüße"])]
    assert rows_of(path, encoding="ISO-8859-1") == [(2, ["1", "Grüße"])]


def test_an_explicit_windows_1252_never_fails(tmp_path: Path) -> None:
    assert rows_of(write(tmp_path, b"id,t\n1,\x81\x9d\x80\n"), encoding="cp1252") == [(2, ["1", "\x81\x9d€"])]


def test_an_explicit_utf8_skips_a_bom_and_does_not_fall_back(tmp_path: Path) -> None:
    path = write(tmp_path, codecs.BOM_UTF8 + b"id,t\n1,ok\n2,ok\n3,caf\xe9\n")
    with pytest.raises(ParseError, match=r"source 'main': line 4: not valid utf-8 text"):
        rows_of(path, encoding="utf-8")


def test_a_utf8_bom_means_utf8_even_when_bytes_are_broken(tmp_path: Path) -> None:
    path = write(tmp_path, codecs.BOM_UTF8 + b"id,t\n1,caf\xe9\n")
    with pytest.raises(ParseError, match="line 2: not valid utf-8"):
        rows_of(path)


def test_a_decode_error_in_an_explicit_codec_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, b"id,t\n1,a\n2,\xff\xfe\n")
    with pytest.raises(ParseError, match="line 3: not valid ascii text"):
        rows_of(path, encoding="ascii")


@pytest.mark.parametrize("name", ["no-such-codec", "base64", "rot13"])
def test_an_unknown_or_non_text_encoding_is_a_parse_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(ParseError, match="unknown text encoding"):
        open_reader(write(tmp_path, b"a\n"), source="main", format="csv", encoding=name)


def test_xml_follows_its_own_encoding_declaration(tmp_path: Path) -> None:
    data = '<?xml version="1.0" encoding="ISO-8859-1"?><r><i><t>Grüße</t></i><i><t>x</t></i></r>'
    assert rows_of(write(tmp_path, data.encode("latin-1"), "f.xml"), "xml")[0][1] == ["Grüße"]


def test_xml_with_a_utf16_bom_is_read(tmp_path: Path) -> None:
    data = '<?xml version="1.0" encoding="UTF-16"?><r><i><t>日本</t></i><i><t>x</t></i></r>'
    path = write(tmp_path, codecs.BOM_UTF16_LE + data.encode("utf-16-le"), "f.xml")
    assert rows_of(path, "xml") == [(1, ["日本"]), (1, ["x"])]


def test_xml_declared_utf8_with_broken_bytes_is_a_syntax_error(tmp_path: Path) -> None:
    data = b'<?xml version="1.0" encoding="UTF-8"?>\n<r><i><t>caf\xe9</t></i></r>'
    with pytest.raises(ParseError, match="line 2: XML syntax error"):
        rows_of(write(tmp_path, data, "f.xml"), "xml")


def test_xml_with_an_unknown_declared_encoding_is_a_parse_error(tmp_path: Path) -> None:
    data = b'<?xml version="1.0" encoding="x-klingon"?><r/>'
    with pytest.raises(ParseError, match="unknown text encoding 'x-klingon'"):
        open_reader(write(tmp_path, data, "f.xml"), source="main", format="xml")


@pytest.mark.parametrize("fmt", ["json", "jsonl", "xml"])
def test_every_format_restarts_when_a_late_byte_is_not_utf8(tmp_path: Path, fmt: str) -> None:
    n = 40_000  # past the first buffer of every reader (JSON reads a million characters at once)
    item = {
        "json": lambda i: f'{{"id": "{i}", "t": "naïve"}},\n',
        "jsonl": lambda i: f'{{"id": "{i}", "t": "naïve"}}\n',
        "xml": lambda i: f"<i><id>{i}</id><t>naïve</t></i>\n",
    }[fmt]
    head, last, tail = {
        "json": (b"[\n", b'{"id": "late", "t": "\x80"}\n', b"]"),
        "jsonl": (b"", b'{"id": "late", "t": "\x80"}\n', b""),
        "xml": (b"<r>\n", b"<i><id>late</id><t>\x80</t></i>\n", b"</r>"),
    }[fmt]
    data = head + "".join(item(i) for i in range(n)).encode() + last + tail
    reader = open_reader(write(tmp_path, data, f"feed.{fmt}"), source="main", format=fmt)
    with pytest.raises(EncodingRestart):
        list(reader)
    rows = list(reader)
    assert reader.stats.encoding == "windows-1252"
    assert rows[0][1] == ["0", "naÃ¯ve"]
    assert rows[-1] == (n + (0 if fmt == "jsonl" else 1) + 1, ["late", "€"])
