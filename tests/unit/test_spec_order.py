"""The spec loader: key paths that name one key whatever it holds, NUL refused with its path (SPEC 8.24)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.spec.loader import load_spec, parse_spec
from firefeed.spec.paths import join_key, quote_key, render_path


def base() -> dict[str, Any]:
    return {
        "company": "acme",
        "project": "p",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def spec_error(doc: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    return info.value


@pytest.mark.parametrize(
    ("key", "part"),
    [
        ("colour", "colour"),
        ("out of stock", "out of stock"),
        ("Größe", "Größe"),
        (".", '["."]'),
        ("a.b", '["a.b"]'),
        ("", '[""]'),
        ("x[0]", '["x[0]"]'),
        ('say "hi"', '["say \\"hi\\""]'),
        (" padded", '[" padded"]'),
        ("tab\there", '["tab\\there"]'),
        ("nul\x00", '["nul\\u0000"]'),
    ],
)
def test_a_key_is_quoted_exactly_when_it_could_be_misread(key: str, part: str) -> None:
    assert quote_key(key) == part
    assert json.loads(part[1:-1]) == key if part.startswith('["') else part == key


def test_paths_join_keys_and_indexes() -> None:
    assert render_path(["sources", 0, "headers", "X-A"]) == "sources[0].headers.X-A"
    assert render_path(["."]) == '["."]'
    assert render_path(["exports", 1, "fields", "a.b"]) == 'exports[1].fields["a.b"]'
    assert render_path(["", "x"]) == '[""].x'
    assert join_key("", "company") == "company"
    assert join_key("rules", 3) == "rules[3]"


@pytest.mark.parametrize(
    ("key", "path"),
    [(".", '["."]'), ("", '[""]'), ("a[1]", '["a[1]"]'), ("sources.x", '["sources.x"]'), ("plain", "plain")],
)
def test_an_unknown_top_level_key_is_named_so_it_can_be_told_apart(key: str, path: str) -> None:
    err = spec_error({**base(), key: "x"})
    assert err.path == path
    assert err.detail == "unknown key" or err.detail.startswith("unknown key (did you mean ")


def test_an_unknown_nested_key_holding_a_dot_is_quoted() -> None:
    doc = base()
    doc["sources"][0]["a.b"] = "x"
    assert spec_error(doc).path == 'sources[0]["a.b"]'


def test_a_bad_template_in_fields_names_a_dotted_output_name_quoted() -> None:
    doc = base()
    doc["exports"][0]["fields"] = {"shipping.price": "{price"}
    assert spec_error(doc).path.startswith('exports[0].fields["shipping.price"]')


@pytest.mark.parametrize(
    ("edit", "path", "what"),
    [
        (lambda d: d.__setitem__("rules", [{"then": [{"set": "t", "value": "a\x00b"}]}]), "rules[0].then[0].value", ""),
        (lambda d: d["sources"][0].__setitem__("headers", {"X-A\x00": "1"}), 'sources[0].headers["X-A\\u0000"]', "key"),
        (lambda d: d["sources"][0].__setitem__("headers", {"X-A": "\x00"}), "sources[0].headers.X-A", ""),
        (lambda d: d.__setitem__("name", "\x00"), "name", ""),
        (lambda d: d.__setitem__("unknown\x00", "x"), '["unknown\\u0000"]', "key"),
        (lambda d: d["exports"][0].__setitem__("fields", {"ID": "i\x00d"}), "exports[0].fields.ID", ""),
        (
            lambda d: d.__setitem__("rules", [{"when": {"field": "t", "op": "in", "value": ["a", "\x00"]}}]),
            "rules[0].when.value[1]",
            "",
        ),
    ],
)
def test_a_nul_anywhere_is_a_spec_error_naming_its_path(edit: Any, path: str, what: str) -> None:
    doc = base()
    edit(doc)
    err = spec_error(doc)
    assert err.path == path
    assert err.detail.startswith("the key holds a NUL" if what == "key" else "holds a NUL")


def test_a_nul_escape_in_yaml_or_json_text_is_a_spec_error() -> None:
    text = 'company: acme\nproject: p\nname: "a\\0b"\nsources: [{name: main, url: main.csv}]\n'
    with pytest.raises(SpecError) as info:
        load_spec(text)
    assert info.value.path == "name"
    doc = {**base(), "name": "a\x00b"}
    with pytest.raises(SpecError) as info:
        load_spec(json.dumps(doc))
    assert info.value.path == "name"
