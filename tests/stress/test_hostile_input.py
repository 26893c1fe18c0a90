"""Hostile input, end to end: fuzzed feeds and specs, XML entity tricks, bombs, path traversal and SSRF.

tests/unit covers each guard on its own (test_parse_fuzz, test_decompress, test_netguard,
test_fetch, test_export_paths). Here every reader and the spec loader get thousands of
structured random inputs, and the attacks go through what a user really drives: a spec
file run with `firefeed run`, a download through FETCH. Only FireFeed's own errors may come
out, each naming the source or the spec key.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import resource
import time
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firefeed.config import reset_settings
from firefeed.errors import FetchError, ParseError, SpecError, UnsafeURLError
from firefeed.pipeline import _netguard
from firefeed.pipeline.parse import EncodingRestart, open_reader
from firefeed.spec.loader import MAX_VALUES, load_spec, parse_spec
from firefeed.spec.model import ProjectSpec
from tests.integration import conftest as integration
from tests.integration.conftest import run_json, write_csv
from tests.unit.test_fetch import CSV, FeedServer, body, fetch, make_settings, status
from tests.unit.test_netguard import fake_getaddrinfo

run_env = integration.run_env  # exports and downloads under tmp_path (a fixture)

FUZZ = settings(max_examples=1500, deadline=None, database=None, suppress_health_check=list(HealthCheck))

# ------------------------------------------------------------------ feeds: every reader through open_reader

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", " ", '"', '""', "\n", "\r\n", ",", ";", "|", "\t", "\x00", "\ufeff", "é", "€", "\u2028", "=cmd|x"]
)


@st.composite
def csv_feeds(draw: st.DrawFn) -> bytes:
    """Rows of random cells joined by a random delimiter, quoted or not: ragged, multi-line, odd bytes."""
    delimiter = draw(st.sampled_from([",", ";", "|", "\t"]))
    rows = draw(st.lists(st.lists(TEXT, min_size=0, max_size=6), min_size=0, max_size=8))
    lines = []
    for row in rows:
        cells = [f'"{c}"' if draw(st.booleans()) else c for c in row]
        lines.append(delimiter.join(cells))
    text = draw(st.sampled_from(["\n", "\r\n", "\r"])).join(lines)
    return text.encode(draw(st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "cp1252"])), errors="replace")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def json_feeds(draw: st.DrawFn) -> bytes:
    """A JSON document: a list of items, an object wrapping one, or any value; sometimes cut short."""
    items = draw(st.lists(JSON_VALUES, max_size=6))
    doc = draw(st.sampled_from(["list", "wrapped", "value"]))
    value: Any = items if doc == "list" else {draw(TEXT): items, "meta": {}} if doc == "wrapped" else items[:1]
    data = json.dumps(value, ensure_ascii=draw(st.booleans())).encode()
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data


@st.composite
def jsonl_feeds(draw: st.DrawFn) -> bytes:
    lines = [json.dumps(v).encode() for v in draw(st.lists(JSON_VALUES, max_size=6))]
    lines += draw(st.lists(st.binary(max_size=8), max_size=2))
    return b"\n".join(draw(st.permutations(lines)))


XML_NAMES = st.sampled_from(["item", "entry", "id", "title", "g:price", "a", "b", "x-y", "_z", "rss", "channel"])
XML_TRICKS = [
    '<!DOCTYPE r [<!ENTITY e "x&e2;"><!ENTITY e2 "y">]>',
    '<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE r [<!ENTITY % p SYSTEM "http://127.0.0.1:9/p.dtd"> %p;]>',
    '<!DOCTYPE r SYSTEM "http://127.0.0.1:9/r.dtd">',
    '<?xml version="1.0" encoding="iso-8859-1"?>',
    '<?xml version="1.1"?>',
    "",
]


@st.composite
def xml_elements(draw: st.DrawFn, depth: int = 0) -> str:
    name = draw(XML_NAMES)
    if depth > 3 or draw(st.integers(0, 3)) == 0:
        text = draw(TEXT).replace("<", "&lt;").replace("&", "&amp;") if draw(st.booleans()) else draw(TEXT)
        if draw(st.integers(0, 5)) == 0:
            text += draw(st.sampled_from(["&x;", "&e;", "&amp;", "&#0;", "&#x1F600;", "<![CDATA[<b>]]>"]))
        return f"<{name}>{text}</{name}>"
    children = "".join(draw(st.lists(xml_elements(depth + 1), max_size=4)))  # type: ignore[call-arg]
    return f"<{name}>{children}</{name}>"


@st.composite
def xml_feeds(draw: st.DrawFn) -> bytes:
    root = draw(st.sampled_from(["rss", "feed", "products", "r"]))
    inner = "".join(draw(st.lists(xml_elements(), max_size=6)))
    doc = draw(st.sampled_from(XML_TRICKS)) + f'<{root} xmlns:g="http://base.google.com/ns/1.0">{inner}</{root}>'
    data = doc.encode("utf-8", errors="replace")
    if draw(st.integers(0, 4)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return data


FEEDS = {"csv": csv_feeds(), "tsv": csv_feeds(), "json": json_feeds(), "jsonl": jsonl_feeds(), "xml": xml_feeds()}


@pytest.fixture(scope="module")
def feed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile_feeds") / "feed"


def read_all(path: Path, fmt: str, encoding: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Rows or a ParseError that names the source; nothing else may escape."""
    reader = open_reader(path, source="fuzzed", format=fmt, encoding=encoding)
    try:
        rows = list(reader)
    except EncodingRestart:
        rows = list(reader)
    return reader.fields, rows


@pytest.mark.parametrize("fmt", list(FEEDS))
def test_every_reader_gives_rows_or_a_parse_error_naming_the_source(
    fmt: str, feed_file: Path, stress_tally: Any
) -> None:
    tried = 0

    @FUZZ
    @given(data=FEEDS[fmt], encoding=st.sampled_from(["auto", "auto", "utf-8", "cp1252", "utf-16"]))
    def check(data: bytes, encoding: str) -> None:
        nonlocal tried
        tried += 1
        feed_file.write_bytes(data)
        try:
            fields, rows = read_all(feed_file, fmt, encoding)
        except ParseError as err:
            assert str(err).startswith("source 'fuzzed': ") and len(str(err)) > len("source 'fuzzed': ")
            return
        assert len(set(fields)) == len(fields) and all(fields)
        for line, values in rows:
            assert line >= 0 and len(values) <= len(fields)
            assert all("\x00" not in v for v in values)
            "".join(values).encode("utf-8")  # storable in Postgres: no lone surrogate

    try:
        check()
    finally:
        stress_tally.inputs_tried(f"{fmt} feeds", tried)
    assert tried >= 500


# ------------------------------------------------------------------ the spec loader

BASE_SPEC: dict[str, Any] = {
    "company": "acme",
    "project": "shoes_it",
    "key": "id",
    "schedule": "0 */6 * * *",
    "sources": [
        {"name": "main", "url": "main.csv", "format": "csv", "encoding": "auto", "delimiter": "auto"},
        {"name": "stock", "url": "https://feeds.example.com/s.json", "mode": "enrich", "fields": ["quantity"]},
    ],
    "rules": [
        {
            "name": "oos",
            "when": {"any": [{"field": "quantity", "op": "lte", "value": "0"}, {"not": {"field": "t", "op": "empty"}}]},
            "then": [
                {"set": "availability", "value": "out {title}"},
                {"math": "price", "op": "multiply", "value": "2"},
            ],
            "else": [{"truncate": "title", "length": "30"}, {"regex_replace": "title", "pattern": "a+", "with": "\\1"}],
        },
        {"then": [{"map": "c", "values": {"a": "b"}, "default": "x"}, {"exclude": "true"}], "enabled": "no"},
    ],
    "exports": [
        {"name": "google", "format": "google-xml", "path": "google.xml", "fields": {"id": "id", "p": "{price} EUR"}},
        {"name": "csv", "format": "csv", "path": "out/shoes.csv", "gzip": "true", "where": {"field": "a", "op": "ne"}},
    ],
}
SPEC_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT | st.sampled_from(["{", "}", "{{x}", "(", "[", "*", "..", "/etc"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(TEXT | st.sampled_from(["op", "field"]), inner, max_size=3)
    ),
    max_leaves=8,
)


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _nodes(v, (*path, i))


@st.composite
def mutated_specs(draw: st.DrawFn) -> Any:
    """The valid spec above with a few random edits: a value replaced, a key dropped or added, a list emptied."""
    doc = copy.deepcopy(BASE_SPEC)
    paths = list(_nodes(doc))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            edit = draw(st.sampled_from(["replace", "drop", "add"]))
            if edit == "replace":
                parent[path[-1]] = draw(SPEC_VALUES)
            elif edit == "drop" and isinstance(parent, dict):
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(TEXT)] = draw(SPEC_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced that node
    return doc


def split_path(path: str) -> list[str | int]:
    """A spec error's key path back into its keys: `a.b[0]["x.y"]` -> ["a", "b", 0, "x.y"].

    A key that holds `.`, `[`, `]`, `"`, `\\` or characters that could be misread, or is empty,
    is written JSON-quoted in brackets (`["."]`); any other key is written bare. A `[` that starts
    neither an index nor a quoted key is read as part of a bare key.
    """
    parts: list[str | int] = []
    decoder = json.JSONDecoder()
    index = re.compile(r"\[(\d+)\]")
    i = 0
    while i < len(path):
        if path.startswith('["', i):
            key, end = decoder.raw_decode(path, i + 1)
            assert path[end] == "]", path
            parts.append(key)
            i = end + 1
            continue
        found = index.match(path, i)
        if found:
            parts.append(int(found.group(1)))
            i = found.end()
            continue
        if path[i] == "." and parts:
            i += 1
        end = i
        while end < len(path) and path[end] != "." and not (path.startswith('["', end) or index.match(path, end)):
            end += 1
        end = max(end, i + 1)  # an unquoted empty key (older paths): take one character, always move on
        parts.append(path[i:end])
        i = end
    return parts


def check_spec_error(err: SpecError, doc: Any) -> None:
    """The message names the offending key's path (when there is one) and says something."""
    assert err.detail.strip(), err
    if err.path and isinstance(doc, dict):
        head = split_path(err.path)[0]
        # A key that is there (bad value, unknown key) or one the spec requires (missing).
        assert head in {str(k) for k in doc} | set(ProjectSpec.model_fields), (err.path, list(doc))


def test_the_spec_loader_accepts_or_names_the_bad_key_for_mutated_specs(stress_tally: Any) -> None:
    tried = 0

    @FUZZ
    @given(doc=mutated_specs(), as_text=st.sampled_from(["dict", "yaml", "json"]))
    def check(doc: Any, as_text: str) -> None:
        nonlocal tried
        tried += 1
        try:
            if as_text == "dict":
                parse_spec(doc)
            elif as_text == "yaml":
                load_spec(yaml.safe_dump(doc, allow_unicode=True))
            else:
                load_spec(json.dumps(doc))
        except SpecError as err:
            check_spec_error(err, doc if as_text == "dict" else None)

    try:
        check()
    finally:
        stress_tally.inputs_tried("specs", tried)
    assert tried >= 500


def test_the_spec_loader_gives_a_spec_error_for_any_text(stress_tally: Any) -> None:
    tried = 0
    pieces = st.sampled_from(
        [
            "company: acme\n",
            "sources:\n",
            "  - ",
            "{",
            "}",
            "[",
            "]",
            "&a ",
            "*a",
            "!!python/object:os.system ",
            "%YAML 1.1\n",
            "---\n",
            ": ",
            "\t",
            "'",
            '"',
            "\\",
        ]
    )

    @FUZZ
    @given(text=st.lists(pieces | TEXT, max_size=30).map("".join))
    def check(text: str) -> None:
        nonlocal tried
        tried += 1
        try:
            load_spec(text)
        except SpecError as err:
            assert err.detail.strip()

    try:
        check()
    finally:
        stress_tally.inputs_tried("spec texts", tried)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep YAML", "company: " + "[" * 50_000 + "]" * 50_000),
        ("deep JSON", '{"company": ' + "[" * 200_000 + "]" * 200_000 + "}"),
        ("deep mapping", "a: " + "{b: " * 5_000 + "c" + "}" * 5_000),
        (
            "YAML alias bomb",
            "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)),
        ),
        ("python tag", "company: !!python/object/apply:os.system ['touch /tmp/ff-pwned']\n"),
    ],
)
def test_hostile_spec_documents_are_spec_errors_quickly(name: str, text: str, stress_tally: Any) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        load_spec(text)
    stress_tally.inputs_tried("spec texts")
    assert time.monotonic() - started < 10, name
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000, name  # KiB
    assert "nests deeper" in str(err.value) or str(MAX_VALUES) in str(err.value) or "company" in str(err.value)
    assert not Path("/tmp/ff-pwned").exists()


# ------------------------------------------------------------------ XML entity tricks through a full run


def xml_project(folder: Path, feed: str, project: str, source_url: str = "feed.xml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "feed.xml").write_text(feed, encoding="utf-8")
    spec = {
        "company": "hostile",
        "project": project,
        "sources": [{"name": "main", "url": source_url, "format": "xml"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


@pytest.fixture()
def hit_server() -> Iterator[FeedServer]:
    """A local server that records every request, serving a secret a leaking parser would copy into the export."""
    srv = FeedServer()
    for path in ("/secret.txt", "/evil.dtd", "/entity"):
        srv.routes[path] = body(b"TOP-SECRET-FROM-THE-NETWORK")
    try:
        yield srv
    finally:
        srv.close()


def test_billion_laughs_in_a_feed_fails_the_run_fast_without_growing(
    run_env: Path, tmp_path: Path, stress_tally: Any
) -> None:
    levels = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    feed = f'<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY l0 "lol">{levels}]>'
    feed += "<rss><channel><item><id>1</id><title>&l9;</title></item><item><id>2</id></item></channel></rss>"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    code, report = run_json(xml_project(tmp_path, feed, "laughs"))
    stress_tally.run()
    assert time.monotonic() - started < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    if code == 0:  # a parser that leaves the reference unexpanded is fine too, as long as nothing grew
        text = (run_env / "hostile" / "laughs" / "out.csv").read_text(encoding="utf-8")
        assert "lollol" not in text
    else:
        assert report["error"]["step"] == "PARSE"
        assert "source 'main'" in report["error"]["message"]


@pytest.mark.parametrize(
    ("kind", "doctype"),
    [
        ("file_entity", '<!DOCTYPE rss [<!ENTITY x SYSTEM "file://{secret}">]>'),
        ("http_entity", '<!DOCTYPE rss [<!ENTITY x SYSTEM "{server}/entity">]>'),
        ("parameter_entity", '<!DOCTYPE rss [<!ENTITY % p SYSTEM "{server}/evil.dtd"> %p;]>'),
        ("external_dtd", '<!DOCTYPE rss SYSTEM "{server}/evil.dtd">'),
        ("public_entity", '<!DOCTYPE rss [<!ENTITY x PUBLIC "-//x//EN" "{server}/entity">]>'),
    ],
)
def test_external_entities_in_a_feed_read_no_file_and_call_no_server(
    kind: str, doctype: str, run_env: Path, tmp_path: Path, hit_server: FeedServer, stress_tally: Any
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-FROM-A-FILE", encoding="utf-8")
    head = doctype.format(secret=secret, server=f"http://127.0.0.1:{hit_server.port}")
    feed = f'<?xml version="1.0"?>{head}<rss xmlns:xi="http://www.w3.org/2001/XInclude"><channel>'
    feed += f'<item><id>1</id><title>a&x;b</title><inc><xi:include href="file://{secret}" parse="text"/></inc></item>'
    feed += "<item><id>2</id><title>plain</title></item></channel></rss>"
    project = f"xxe_{kind}"
    code, report = run_json(xml_project(tmp_path / "spec", feed, project))
    stress_tally.run()
    assert sum(hit_server.hits.values()) == 0, dict(hit_server.hits)
    if code == 0:
        text = (run_env / "hostile" / project / "out.csv").read_text(encoding="utf-8")
        assert "TOP-SECRET" not in text
        assert "plain" in text
    else:
        assert report["error"]["step"] == "PARSE", report["error"]
        assert "TOP-SECRET" not in json.dumps(report)


# ------------------------------------------------------------------ bombs through FETCH


def _gzip_bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1024 * 1024)
    return b"".join(packer.compress(zeros) for _ in range(megabytes)) + packer.flush()


def _zip_bomb(megabytes: int, lie: bool) -> bytes:
    from io import BytesIO

    buf = BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("feed.csv", b"id\n" + b"1" * (megabytes * 1024 * 1024))
    data = bytearray(buf.getvalue())
    if lie:  # declare 10 bytes in the local and central headers: only the streamed cap can stop it
        for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            at = data.find(sig)
            data[at + offset : at + offset + 4] = (10).to_bytes(4, "little")
    return bytes(data)


@pytest.fixture(scope="module")
def bomb_server() -> Iterator[FeedServer]:
    srv = FeedServer()
    srv.routes["/gzip.csv.gz"] = body(_gzip_bomb(300))
    srv.routes["/nested.csv.gz"] = body(gzip.compress(_gzip_bomb(300)))
    srv.routes["/encoded.csv"] = body(_gzip_bomb(300), Content_Encoding="gzip")
    srv.routes["/zip.zip"] = body(_zip_bomb(300, lie=False))
    srv.routes["/lying.zip"] = body(_zip_bomb(300, lie=True))
    try:
        yield srv
    finally:
        srv.close()


@pytest.mark.parametrize("path", ["/gzip.csv.gz", "/nested.csv.gz", "/encoded.csv", "/zip.zip", "/lying.zip"])
def test_a_compression_bomb_fails_the_run_at_fetch_and_leaves_no_file(
    path: str,
    run_env: Path,
    tmp_path: Path,
    bomb_server: FeedServer,
    monkeypatch: pytest.MonkeyPatch,
    stress_tally: Any,
) -> None:
    monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("FIREFEED_FETCH_MAX_BYTES", str(8 * 1024 * 1024))
    monkeypatch.setenv("FIREFEED_FETCH_MAX_DECOMPRESSED_BYTES", str(8 * 1024 * 1024))
    reset_settings()
    project = "bomb_" + path.strip("/").split(".")[0]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "company": "hostile",
                "project": project,
                "sources": [{"name": "main", "url": f"http://127.0.0.1:{bomb_server.port}{path}", "format": "csv"}],
                "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
            }
        ),
        encoding="utf-8",
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    code, report = run_json(spec)
    stress_tally.run()
    stress_tally.inputs_tried("compression bombs")
    assert time.monotonic() - started < 60
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: streamed, never in memory
    assert code == 1, report
    assert "source 'main'" in report["error"]["message"]
    if path == "/nested.csv.gz":
        # One layer is undone, never two: the inner gzip reaches the CSV reader as bytes and is refused there.
        assert report["error"]["step"] == "PARSE", report["error"]
    else:
        assert report["error"]["step"] == "FETCH", report["error"]
        # A zip whose headers lie about the size is read only as far as it claims, then fails its CRC.
        expected = "not a valid zip file" if path == "/lying.zip" else "size cap of 8388608 bytes"
        assert expected in report["error"]["message"], report["error"]
    leftovers = [p for p in (tmp_path / "var").rglob("*") if p.is_file() and p.stat().st_size > 1024 * 1024]
    assert leftovers == []
    assert not (run_env / "hostile" / project / "out.csv").exists()


# ------------------------------------------------------------------ path traversal: export paths and source paths


@pytest.mark.parametrize(
    "path",
    ["../escape.csv", "a/../../escape.csv", "/tmp/escape.csv", "..\\escape.csv", "~/escape.csv", "C:/x.csv", "a/\x00b"],
)
def test_an_export_path_leaving_the_project_folder_is_a_spec_error_naming_it(path: str, stress_tally: Any) -> None:
    doc = copy.deepcopy(BASE_SPEC)
    doc["exports"][1]["path"] = path
    stress_tally.inputs_tried("paths")
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert err.value.path == "exports[1].path"
    # A NUL is refused before the path is looked at, anywhere in a spec (SPEC 8.24).
    expected = "NUL character" if "\x00" in path else "inside the project's export folder"
    assert expected in err.value.detail


def _csv_export_spec(folder: Path, project: str, export_path: str) -> Path:
    """A spec of company `hostile` reading folder/main.csv, with one csv export at `export_path`."""
    spec = folder / "spec.yaml"
    doc = {
        "company": "hostile",
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": export_path}],
    }
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return spec


@pytest.mark.parametrize("path", ["%2e%2e/escape.csv", "..%2fescape.csv", "%2E%2E%5Cescape.csv", "．．/escape.csv"])
def test_an_encoded_export_path_is_a_literal_name_inside_the_project_folder(
    path: str, run_env: Path, tmp_path: Path, stress_tally: Any
) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title"], [["1", "Shoe"]])
    project = f"enc_{abs(hash(path)) % 10_000}"
    spec = _csv_export_spec(tmp_path, project, path)
    code, report = run_json(spec)
    stress_tally.run()
    stress_tally.inputs_tried("paths")
    assert code == 0, report["error"]
    written = (run_env / report["exports"][0]["path"]).resolve()
    assert written.is_relative_to((run_env / "hostile" / project).resolve())
    assert not (run_env / "escape.csv").exists() and not (run_env / "hostile" / "escape.csv").exists()


@pytest.mark.parametrize("link", ["folder", "file"])
def test_a_symlink_in_the_export_folder_pointing_outside_fails_the_export_and_writes_nothing_outside(
    link: str, run_env: Path, tmp_path: Path, stress_tally: Any
) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title"], [["1", "Shoe"]])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.csv").write_text("untouched", encoding="utf-8")
    project = f"symlink_{link}"
    folder = run_env / "hostile" / project
    folder.mkdir(parents=True)
    if link == "folder":
        (folder / "sub").symlink_to(outside, target_is_directory=True)
        export_path = "sub/victim.csv"
    else:
        (folder / "out.csv").symlink_to(outside / "victim.csv")
        export_path = "out.csv"
    spec = _csv_export_spec(tmp_path, project, export_path)
    code, report = run_json(spec)
    stress_tally.run()
    stress_tally.inputs_tried("paths")
    assert code == 1
    assert report["error"]["step"] == "EXPORT"
    assert "outside the project's export folder" in report["error"]["message"]
    assert (outside / "victim.csv").read_text(encoding="utf-8") == "untouched"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.csv"]


@pytest.mark.parametrize(
    "url",
    [
        "../secret.csv",
        "sub/../../secret.csv",
        "{outside}/secret.csv",
        "file://{outside}/secret.csv",
        "file:///{outside}/%2e%2e/outside/secret.csv",
        "file://localhost{outside}/secret.csv",
        "%2e%2e/secret.csv",
        "link/secret.csv",
        "linked.csv",
        "file:///etc/passwd",
        "/proc/self/environ",
    ],
)
def test_a_source_path_leaving_the_spec_folder_is_refused_and_reads_nothing(
    url: str, run_env: Path, tmp_path: Path, stress_tally: Any
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    write_csv(outside / "secret.csv", ["id", "title"], [["S1", "TOP-SECRET"]])
    folder = outside.parent / "spec"
    folder.mkdir()
    (folder / "link").symlink_to(outside, target_is_directory=True)
    (folder / "linked.csv").symlink_to(outside / "secret.csv")
    project = f"srcpath_{abs(hash(url)) % 100_000}"
    spec = folder / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "company": "hostile",
                "project": project,
                "sources": [{"name": "main", "url": url.format(outside=outside), "format": "csv"}],
                "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
            }
        ),
        encoding="utf-8",
    )
    code, report = run_json(spec)
    stress_tally.run()
    stress_tally.inputs_tried("paths")
    if url == "%2e%2e/secret.csv":
        # A plain path is not URL-decoded: it names a file called "%2e%2e/secret.csv" in the spec folder.
        assert code == 1 and "no such file" in report["error"]["message"]
        assert report["error"]["step"] == "FETCH"
        assert report["error"]["message"].startswith("source 'main': ")
    else:
        # Refused as a spec error when the spec is applied (#48), naming the key and the allowed folders.
        assert code == 2, report
        assert report["error"]["path"] == "sources[0].url"
        assert "outside the allowed folders" in report["error"]["message"], report["error"]
        assert str(folder.resolve()) in report["error"]["message"]
    assert "TOP-SECRET" not in json.dumps(report)
    assert not (run_env / "hostile" / project / "out.csv").exists()


# ------------------------------------------------------------------ SSRF

NON_PUBLIC = [
    "127.0.0.1",
    "127.1.2.3",
    "169.254.169.254",
    "169.254.1.1",
    "10.0.0.1",
    "10.255.255.254",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.0.1",
    "192.168.255.254",
    "::1",
    "fc00::1",
    "fd00:ec2::254",
    "fe80::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "0.0.0.0",
]


def _literal_url(address: str, port: int = 80) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}/feed.csv"


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_a_literal_non_public_address_is_refused_before_any_connection(
    address: str, tmp_path: Path, stress_tally: Any
) -> None:
    stress_tally.inputs_tried("ssrf urls")
    with pytest.raises(UnsafeURLError) as err:
        fetch(_literal_url(address), tmp_path, settings=make_settings(fetch_allow_private=False))
    assert err.value.source == "main"
    assert "non-public address" in str(err.value) and "FIREFEED_FETCH_ALLOW" in str(err.value)


#: what FIREFEED_FETCH_ALLOW_PRIVATE still refuses: link-local and cloud metadata
METADATA = {"169.254.169.254", "169.254.1.1", "fd00:ec2::254", "fe80::1", "::ffff:169.254.169.254"}


@pytest.mark.parametrize("address", sorted(METADATA))
def test_a_metadata_address_is_refused_even_when_private_fetches_are_allowed(
    address: str, tmp_path: Path, stress_tally: Any
) -> None:
    stress_tally.inputs_tried("ssrf urls")
    with pytest.raises(UnsafeURLError, match="FIREFEED_FETCH_ALLOW_PRIVATE does not allow it"):
        fetch(_literal_url(address, port=9), tmp_path, settings=make_settings(fetch_allow_private=True))


@pytest.mark.parametrize(
    "address", [a for a in NON_PUBLIC if not a.startswith(("127.", "::1", "0.0")) and a not in METADATA]
)
def test_a_literal_non_public_address_is_let_through_when_private_fetches_are_allowed(
    address: str, tmp_path: Path, stress_tally: Any
) -> None:
    # Nothing listens there: the guard let it pass if the failure is a connection error, not a refusal.
    stress_tally.inputs_tried("ssrf urls")
    settings = make_settings(fetch_allow_private=True, fetch_retries=0, fetch_timeout_s=0.3)
    with pytest.raises(FetchError) as err:
        fetch(_literal_url(address, port=9), tmp_path, settings=settings)
    assert not isinstance(err.value, UnsafeURLError), err.value


@pytest.fixture()
def feed_server() -> Iterator[FeedServer]:
    srv = FeedServer()
    srv.routes["/feed.csv"] = body(CSV)
    try:
        yield srv
    finally:
        srv.close()


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_a_dns_name_resolving_to_a_non_public_address_is_refused(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, feed_server: FeedServer, stress_tally: Any
) -> None:
    # No DNS server runs here: the resolver's answer is set, the guard's check and the connection are real.
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("93.184.216.34", address))
    stress_tally.inputs_tried("ssrf urls")
    with pytest.raises(UnsafeURLError, match=r"host 'feeds\.rebind\.test' resolves to"):
        fetch(
            f"http://feeds.rebind.test:{feed_server.port}/feed.csv",
            tmp_path,
            settings=make_settings(fetch_allow_private=False),
        )
    assert feed_server.hits["/feed.csv"] == 0


def test_localhost_by_name_is_refused_and_fetched_when_allowed(
    tmp_path: Path, feed_server: FeedServer, stress_tally: Any
) -> None:
    url = f"http://localhost:{feed_server.port}/feed.csv"
    stress_tally.inputs_tried("ssrf urls", 3)
    with pytest.raises(UnsafeURLError, match="host 'localhost' resolves to"):
        fetch(url, tmp_path, settings=make_settings(fetch_allow_private=False))
    assert feed_server.hits["/feed.csv"] == 0
    for allowed in (
        make_settings(fetch_allow_private=True),
        make_settings(fetch_allow_private=False, fetch_allowed_hosts="localhost"),
    ):
        result = fetch(url, tmp_path, settings=allowed)
        assert result.path is not None and result.path.read_bytes() == CSV
    assert feed_server.hits["/feed.csv"] == 2


def test_a_name_allowed_by_setting_reaches_a_private_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, feed_server: FeedServer
) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("127.0.0.1"))
    url = f"http://intranet.test:{feed_server.port}/feed.csv"
    with pytest.raises(UnsafeURLError):
        fetch(url, tmp_path, settings=make_settings(fetch_allow_private=False, fetch_allowed_hosts="other.test"))
    result = fetch(
        url, tmp_path, settings=make_settings(fetch_allow_private=False, fetch_allowed_hosts="intranet.test")
    )
    assert result.path is not None and result.path.read_bytes() == CSV


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_a_redirect_to_a_non_public_address_is_refused_without_following_it(
    address: str, tmp_path: Path, feed_server: FeedServer, stress_tally: Any
) -> None:
    feed_server.routes["/go"] = status(302, Location=_literal_url(address, feed_server.port))
    stress_tally.inputs_tried("ssrf urls")
    # 127.0.0.1 is allowed by name so the first hop reaches the test server; the redirect target is not.
    settings = make_settings(fetch_allow_private=False, fetch_allowed_hosts="127.0.0.1")
    if address == "127.0.0.1":
        settings = make_settings(fetch_allow_private=False, fetch_allowed_hosts="localhost")
        url = f"http://localhost:{feed_server.port}/go"
    else:
        url = f"http://127.0.0.1:{feed_server.port}/go"
    with pytest.raises(UnsafeURLError, match="non-public address"):
        fetch(url, tmp_path, settings=settings)
    assert feed_server.hits["/go"] == 1
    assert feed_server.hits["/feed.csv"] == 0


def test_a_redirect_to_loopback_is_followed_when_private_fetches_are_allowed(
    tmp_path: Path, feed_server: FeedServer
) -> None:
    feed_server.routes["/go"] = status(302, Location=f"http://localhost:{feed_server.port}/feed.csv")
    result = fetch(
        f"http://127.0.0.1:{feed_server.port}/go", tmp_path, settings=make_settings(fetch_allow_private=True)
    )
    assert result.path is not None and result.path.read_bytes() == CSV
    assert feed_server.hits["/feed.csv"] == 1


def test_a_spec_with_a_metadata_url_fails_the_run_at_fetch_naming_the_setting(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stress_tally: Any
) -> None:
    monkeypatch.delenv("FIREFEED_FETCH_ALLOW_PRIVATE", raising=False)
    monkeypatch.delenv("FIREFEED_FETCH_ALLOWED_HOSTS", raising=False)
    reset_settings()
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "company": "hostile",
                "project": "metadata",
                "sources": [{"name": "main", "url": "http://169.254.169.254/latest/meta-data/iam", "format": "csv"}],
                "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
            }
        ),
        encoding="utf-8",
    )
    code, report = run_json(spec)
    stress_tally.run()
    assert code == 1
    assert report["error"]["step"] == "FETCH"
    assert "non-public address" in report["error"]["message"]
    assert "FIREFEED_FETCH_ALLOWED_HOSTS" in report["error"]["message"]
    assert os.environ.get("FIREFEED_FETCH_ALLOW_PRIVATE") is None
