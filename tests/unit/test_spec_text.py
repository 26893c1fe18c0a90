"""The spec as the page edits it (#53): key paths split back into keys, and mapped to lines and columns."""

from __future__ import annotations

import json

import pytest
import yaml

from firefeed.api.spec_text import compose, error_list, locate, path_parts, spec_yaml
from firefeed.errors import SpecError
from firefeed.rules.model import OPS, parse_rules
from firefeed.spec.paths import render_path
from firefeed.suggest import did_you_mean

TEXT = """\
company: acme
exports:
  - name: out
    fields:
      "a.b": title
      price: price
rules:
  - name: r
    then:
      - {set: x, value: "1"}
"""


def test_a_rendered_path_splits_back_into_its_keys() -> None:
    for parts in (["rules", 2, "then", 0, "set"], ["exports", 0, "fields", "a.b"], ["x", "", 'q"uo[te]', 3]):
        assert path_parts(render_path(parts)) == parts


def test_a_path_points_at_its_key_and_a_missing_key_at_its_mapping() -> None:
    root = compose(TEXT)
    where = locate(root, 'exports[0].fields["a.b"]')
    assert (where.line, where.column) == (5, 7)
    where = locate(root, "exports[0].fields.price")
    assert (where.line, where.column) == (6, 7)
    where = locate(root, "rules[0].then[0].value")
    assert (where.line, where.column) == (10, 18)  # the key `value`
    where = locate(root, "rules[0].when")  # not there: the rule's mapping
    assert (where.line, where.column) == (8, 5)
    assert locate(None, "company").line is None


def test_every_problem_keeps_its_path_and_the_suggestion_is_apart() -> None:
    err = SpecError.of(
        [SpecError("exports[0].fields.price", "unknown key (did you mean 'prize'?)"), SpecError("", "x")]
    )
    first, second = error_list(err, TEXT)
    assert first == {
        "path": "exports[0].fields.price",
        "line": 6,
        "column": 7,
        "message": "unknown key",
        "suggestion": "did you mean 'prize'?",
    }
    assert second["path"] == "" and second["suggestion"] is None


def test_the_yaml_keeps_the_documents_key_order_and_its_texts() -> None:
    doc = {"z": "1", "a": {"y": "true", "b": "<b>x</b>"}, "list": ["010", ""]}
    text = spec_yaml(doc)
    assert list(yaml.load(text, Loader=yaml.BaseLoader)) == ["z", "a", "list"]
    assert yaml.load(text, Loader=yaml.BaseLoader) == doc
    assert yaml.safe_load(text) == doc  # quoted where YAML would read a number or a boolean


def test_a_suggestion_ends_at_its_own_parenthesis_and_the_message_keeps_what_follows_it() -> None:
    # The rules' own error: the suggestion, then the choices in a parenthesis of their own.
    try:
        parse_rules([{"name": "r", "when": {"field": "x", "op": "eqq", "value": "1"}}], key_field="id")
    except SpecError as err:
        (problem,) = error_list(err, "")
    else:
        raise AssertionError("op eqq was accepted")
    assert problem["suggestion"] == "did you mean 'eq'?"
    assert problem["message"] == f"unknown op 'eqq' (expected one of {', '.join(OPS)})"


def test_a_suggested_name_holding_a_parenthesis_or_a_question_mark_is_kept_whole() -> None:
    odd = "size (eu)? #2"
    detail = f"unknown key{did_you_mean('size (eu)?', [odd])} (expected one of {odd})"
    assert "In YAML ' #' starts a comment" in detail
    (problem,) = error_list(SpecError.of([SpecError("x", detail)]), "")
    assert problem["suggestion"] == f"did you mean {odd!r}? In YAML ' #' starts a comment: quote the name, \"{odd}\""
    assert problem["message"] == f"unknown key (expected one of {odd})"
    (plain,) = error_list(SpecError.of([SpecError("x", "must be one of a, b (did you spell it?)")]), "")
    assert plain == {**plain, "message": "must be one of a, b (did you spell it?)", "suggestion": None}


def test_a_suggested_name_holding_quotes_or_a_backslash_reads_back_as_written() -> None:
    for name in ("o'clock", 'say "hi" \\o/', "tab\there"):
        detail = f"unknown key{did_you_mean(name + 'x', [name])} (expected one of a)"
        (problem,) = error_list(SpecError.of([SpecError("x", detail)]), "")
        assert (problem["message"], problem["suggestion"]) == (
            "unknown key (expected one of a)",
            f"did you mean {name!r}?",
        )


class _CountedEntries(list):  # type: ignore[type-arg]
    """A mapping node's entries that count how often they are read through."""

    reads = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        _CountedEntries.reads += 1
        return super().__iter__()


def test_many_problems_in_one_mapping_read_its_keys_once_not_once_per_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile draft (one lookup row of 60,000 keys, each not text, inside the 1 MB cap) gave one problem
    per key, and each problem's line was found by reading the row's keys from the start: 20,000 keys took
    43 s of the API's CPU for one POST /validate."""
    n = 2000
    text = "lookups:\n  - name: cats\n    rows:\n      - " + "\n        ".join(f"k{i}: []" for i in range(n)) + "\n"
    real = yaml.compose

    def counted(stream: str, Loader: type) -> yaml.Node:
        root = real(stream, Loader=Loader)
        row = root.value[0][1].value[0].value[1][1].value[0]
        assert isinstance(row, yaml.MappingNode) and len(row.value) == n
        row.value = _CountedEntries(row.value)
        return root

    monkeypatch.setattr(yaml, "compose", counted)
    err = SpecError.of([SpecError(f"lookups[0].rows[0].k{i}", "must be text") for i in range(n)])
    found = error_list(err, text)
    assert [(e["line"], e["column"]) for e in found[:2]] == [(4, 9), (5, 9)]
    assert found[-1]["line"] == n + 3
    assert _CountedEntries.reads <= 2


def test_a_stored_spec_with_nulls_reads_back_from_its_yaml() -> None:
    """A spec PUT as JSON may say `"format": null`; it is stored as sent. Its YAML text (GET .../spec, and
    what validate checks without a body) wrote `null`, which the loader reads as the text "null": the
    stored spec no longer loaded from its own text."""
    from firefeed.spec.loader import load_spec

    sent = {
        "company": "acme",
        "project": "p1",
        "schedule": None,
        "sources": [{"name": "main", "url": "https://example.com/a.csv", "format": None}],
        "exports": [{"name": "f", "format": "csv", "path": "f.csv", "channel": None}],
    }
    stored = load_spec(json.dumps(sent)).model_dump(mode="json", exclude_unset=True)
    assert stored["sources"][0]["format"] is None  # as sent
    again = load_spec(spec_yaml(stored))
    assert again.model_dump(mode="json") == load_spec(json.dumps(sent)).model_dump(mode="json")
