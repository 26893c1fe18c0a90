"""Any bytes, any reader: the result is rows or a ParseError, never another exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firefeed.errors import ParseError
from firefeed.pipeline.parse import EncodingRestart, open_reader

FORMATS = ["csv", "tsv", "json", "jsonl", "xml"]
ENCODINGS = ["auto", "auto", "auto", "utf-16", "latin-1", "utf-8"]

SEEDS = [
    b'id,title\n1,"a\nb"\n2,c;d|e\n',
    b'[{"id": 1, "b": {"c": [1, 2.50, null]}}, {"id": "x\\u0000"}]',
    b'{"meta": {}, "items": [{"a": true}]}',
    b'{"a": 1}\n\n{"b": [2]}\n',
    b'<?xml version="1.0"?><rss xmlns:g="urn:g"><channel><item><g:a>1</g:a><b><![CDATA[x]]></b></item></channel></rss>',
    b"<r><p><a>1</a><a>2</a><s><c>3</c></s></p><p/></r>",
    b'<!DOCTYPE r [<!ENTITY e "x&e2;"><!ENTITY e2 "y">]><r><i><t>&e;</t></i></r>',
]
TOKENS = [
    b'"',
    b",",
    b";",
    b"\t",
    b"\n",
    b"\r",
    b"\x00",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b"<",
    b">",
    b"</",
    b"\xff",
    b"\xc3",
    b"\xef\xbb\xbf",
    b"\\u",
    b"\\ud800",
    b"&",
    b"<!DOCTYPE",
    b"<![CDATA[",
    b'<?xml version="1.0" encoding="latin-1"?>',
    b"1e5",
    b"-",
    b"true",
    b"null",
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A plausible feed with a few random edits: reaches deeper than uniform noise."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(data)))
        edit = draw(st.sampled_from(["insert", "delete", "noise"]))
        if edit == "insert":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif edit == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
    return bytes(data)


@pytest.fixture(scope="module")
def feed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "feed"


def _check(path: Path, data: bytes, fmt: str, encoding: str) -> None:
    path.write_bytes(data)
    try:
        reader = open_reader(path, source="fuzz", format=fmt, encoding=encoding)
        try:
            rows = list(reader)
        except EncodingRestart:
            rows = list(reader)
    except ParseError as exc:
        assert str(exc).startswith("source 'fuzz': ")
        return
    fields = reader.fields
    assert len(set(fields)) == len(fields)
    assert all(name and "\x00" not in name for name in fields)
    assert reader.stats.rows == len(rows)
    for line, values in rows:
        assert isinstance(line, int) and line >= 0
        assert len(values) <= len(fields)
        assert all(isinstance(v, str) and "\x00" not in v for v in values)
        "".join(values).encode("utf-8")  # storable: no lone surrogates


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=st.binary(max_size=300), fmt=st.sampled_from(FORMATS), encoding=st.sampled_from(ENCODINGS))
def test_random_bytes_give_rows_or_a_parse_error(feed_file: Path, data: bytes, fmt: str, encoding: str) -> None:
    _check(feed_file, data, fmt, encoding)


@SETTINGS
@given(data=mutated(), fmt=st.sampled_from(FORMATS), encoding=st.sampled_from(ENCODINGS))
def test_damaged_feeds_give_rows_or_a_parse_error(feed_file: Path, data: bytes, fmt: str, encoding: str) -> None:
    _check(feed_file, data, fmt, encoding)
