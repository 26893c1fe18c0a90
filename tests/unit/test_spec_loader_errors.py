"""Where a spec error points: the key path inside the spec, never the file or request it came in."""

from __future__ import annotations

import pytest

from firefeed.api.service import spec_from_body
from firefeed.config import get_settings
from firefeed.errors import SpecError
from firefeed.spec.loader import MAX_DEPTH, load_spec

MAX_SPEC_BYTES = get_settings().spec_max_bytes

WHERE = "POST /api/projects/p/preview"


def spec_text(when: str) -> str:
    return (
        '{"company": "c", "project": "p", "sources": [{"name": "main", "url": "http://example.com/f.csv"}], '
        f'"rules": [{{"when": {when}, "then": [{{"set": "a", "value": "x"}}]}}], "exports": []}}'
    )


def deep_all(groups: int) -> str:
    return '{"all": [' * groups + '{"field": "a", "op": "eq", "value": "1"}' + "]}" * groups


def refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_spec(text, filename=WHERE)
    return err.value


# rules[0].when sits 3 levels deep and each `all` group adds two (its mapping and its list), so the value
# past MAX_DEPTH is the condition inside the 31st group.
DEEPEST = "rules[0].when" + ".all[0]" * ((MAX_DEPTH - 3) // 2 + 1)


@pytest.mark.parametrize("groups", [40, 400, 3000])
def test_a_deep_all_names_the_key_where_it_got_too_deep(groups: int) -> None:
    # 40 and 400 groups are decoded and refused by the depth check; 3000 overflow the decoder first.
    err = refused(spec_text(deep_all(groups)))
    assert (err.path, err.detail) == (DEEPEST, f"the spec nests deeper than {MAX_DEPTH} levels")
    assert WHERE not in str(err)


def test_the_yaml_form_of_a_too_deep_spec_names_the_same_key() -> None:
    text = spec_text(deep_all(3000))
    yaml_text = "company: c\nproject: p\nrules:\n  - when: " + deep_all(3000) + "\n"
    assert refused(yaml_text).path == refused(text).path == DEEPEST


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("[" * 5000, "[0]" * (MAX_DEPTH + 1)),
        ('{"x": {"a.b": ' + "[" * 3000 + "]" * 3000 + "}}", 'x["a.b"]' + "[0]" * (MAX_DEPTH - 1)),
    ],
)
def test_a_too_deep_document_of_any_shape_names_its_key(text: str, path: str) -> None:
    assert refused(text).path == path


def test_a_document_that_is_not_yaml_has_the_whole_document_as_its_path() -> None:
    err = refused("a: [\n b: {")
    assert err.path == ""
    assert err.detail.startswith(f"{WHERE}: not valid YAML or JSON")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b" " * (MAX_SPEC_BYTES + 1), "larger than"),
        (b"\xff\xfe", "UTF-8"),
        (b"[1, 2]", "must be a mapping"),
    ],
)
def test_an_error_about_the_whole_body_has_an_empty_path(body: bytes, message: str) -> None:
    with pytest.raises(SpecError) as err:
        spec_from_body("c", "p", body, where=WHERE)
    assert err.value.path == "" and message in err.value.detail


def test_a_deep_body_names_its_key_not_the_request() -> None:
    with pytest.raises(SpecError) as err:
        spec_from_body("c", "p", spec_text(deep_all(3000)).encode(), where=WHERE)
    assert err.value.path == DEEPEST


def test_every_mistake_of_a_spec_is_said_at_once_with_the_name_it_likely_meant() -> None:
    """Three runs to learn three mistakes was the first hour's complaint (#48): one load says all of them."""
    from firefeed.errors import SpecError
    from firefeed.spec.loader import load_spec

    text = """
company: acme
project: shoes
nmae: Shoes
sources:
  - {name: main, url: main.csv, fromat: csv}
rules:
  - name: r1
    when: {field: price, op: gtx, value: 1}
    then: [{set: price, valu: 2}]
  - name: r2
    then: [{sett: label, value: x}]
exports:
  - {name: csv, format: cvs, path: out.csv, whre: {field: a, op: eq, value: b}}
"""
    with pytest.raises(SpecError) as caught:
        load_spec(text)
    problems = {p.path: p.detail for p in caught.value.problems}
    assert set(problems) == {
        "nmae",
        "sources[0].fromat",
        "exports[0].format",
        "exports[0].whre",
        "rules[0].when.op",
        "rules[0].then[0].valu",
        "rules[1].then[0]",
    }
    assert "did you mean 'name'?" in problems["nmae"]
    assert "did you mean 'format'?" in problems["sources[0].fromat"]
    assert "did you mean 'csv'?" in problems["exports[0].format"]
    assert "did you mean 'where'?" in problems["exports[0].whre"]
    assert "did you mean 'gt'?" in problems["rules[0].when.op"]
    assert "did you mean 'value'?" in problems["rules[0].then[0].valu"]
    text_of_error = str(caught.value)
    assert text_of_error.startswith(f"{len(problems)} problems in the spec:")
    assert all(f"  {path}: " in text_of_error for path in problems)


def test_mistakes_the_checks_after_the_keys_find_are_said_together_too() -> None:
    from firefeed.errors import SpecError
    from firefeed.spec.loader import parse_spec

    doc = {
        "company": "acme",
        "project": "shoes",
        "sources": [{"name": "main", "url": "a.csv"}, {"name": "main", "url": "b.csv"}],
        "rules": [{"name": "r", "when": {"field": "x", "op": "eq"}, "then": [{"set": "y", "value": "1"}]}],
        "exports": [{"name": "e", "format": "csv", "path": "o.csv"}, {"name": "e", "format": "csv", "path": "p.csv"}],
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(doc)
    paths = [p.path for p in caught.value.problems]
    assert "sources[1].name" in paths and "exports[1].name" in paths
    assert any(p.startswith("rules[0]") for p in paths)
