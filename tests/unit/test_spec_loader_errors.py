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
