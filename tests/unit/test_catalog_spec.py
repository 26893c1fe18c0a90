"""SPEC 9 in the spec document: key_from, lookups, groups and channel rules, and their mistakes by path."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.spec.loader import parse_spec


def _spec(**top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"company": "acme", "project": "p1", "sources": [{"name": "main", "url": "main.csv"}]}
    doc.update(top)
    return doc


def _error(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    return info.value


def test_key_from_is_a_template_of_the_source() -> None:
    spec = parse_spec(_spec(sources=[{"name": "main", "url": "main.csv", "key_from": "{Handle}-{Option1 Value}"}]))
    template = spec.primary.key_template
    assert template is not None and template.fields == ("Handle", "Option1 Value")


def test_a_key_from_with_a_lone_brace_names_its_source() -> None:
    err = _error(_spec(sources=[{"name": "main", "url": "main.csv"}, {"name": "b", "url": "b.csv", "key_from": "{a"}]))
    assert err.path == "sources[1].key_from"


LOOKUP = {"name": "cats", "url": "cats.csv", "key": "code"}


def _lookup_rule(**action: Any) -> list[dict[str, Any]]:
    return [{"name": "r", "then": [{"lookup": "cats", "match": "cat", "set": {"gpc": "gpc"}, **action}]}]


def test_a_lookup_action_is_parts_per_field_the_matched_field_last() -> None:
    from firefeed.rules.lookups import LookupSet

    spec = parse_spec(
        _spec(
            lookups=[LOOKUP],
            rules=[
                {
                    "then": [
                        {
                            "lookup": "cats",
                            "match": "cat",
                            "set": {"cat": "name", "gpc": "gpc"},
                            "default": {"label": "none {cat}"},
                        }
                    ]
                }
            ],
        )
    )
    parts = spec.parsed_rules[0].then
    assert all(isinstance(p, LookupSet) for p in parts)
    assert [p.field for p in parts] == ["gpc", "label", "cat"]  # type: ignore[union-attr]
    assert [p.column for p in parts] == ["gpc", None, "name"]  # type: ignore[union-attr]
    assert parts[0].columns == ("name", "gpc") and parts[0].first  # type: ignore[union-attr]
    assert spec.lookup_tables["cats"].startswith("lkp_p1_")


def test_fields_a_lookup_creates_keep_the_written_order_though_the_matched_field_is_computed_last() -> None:
    """8.21: `cat` is written first; computing it last (so the other parts read its old value) moves nothing."""
    from firefeed.rules._plan import plan_passes

    action = {"lookup": "cats", "match": "cat", "set": {"cat": "name", "gpc": "gpc"}, "default": {"label": "x"}}
    spec = parse_spec(_spec(lookups=[LOOKUP], rules=[{"then": [action]}]))
    assert [p.field for p in spec.parsed_rules[0].then] == ["gpc", "label", "cat"]  # type: ignore[union-attr]
    (plan,) = plan_passes(spec.parsed_rules, ["id", "title"])
    assert plan.fields_out == ("id", "title", "cat", "gpc", "label")


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        (_spec(rules=_lookup_rule()), "rules[0].then[0].lookup", "names no lookup"),
        (_spec(lookups=[LOOKUP], rules=_lookup_rule(match="")), "rules[0].then[0].match", ""),
        (_spec(lookups=[LOOKUP], rules=_lookup_rule(set={"id": "gpc"})), "rules[0].then[0].set.id", "key field"),
        (
            _spec(lookups=[LOOKUP], rules=_lookup_rule(default={"id": "x"})),
            "rules[0].then[0].default.id",
            "key field",
        ),
        (_spec(lookups=[LOOKUP], rules=_lookup_rule(set="gpc")), "rules[0].then[0].set", "mapping"),
        (_spec(lookups=[LOOKUP], rules=_lookup_rule(set={}, default=None)), "rules[0].then[0].set", "at least one"),
        (_spec(lookups=[LOOKUP], rules=_lookup_rule(value="x")), "rules[0].then[0].value", "unknown key"),
        (_spec(lookups=[LOOKUP, LOOKUP]), "lookups[1].name", "repeats"),
        (_spec(lookups=[{"name": "cats", "url": "cats.csv"}]), "lookups[0].key", "required"),
        (_spec(lookups=[{"name": "c", "url": "cats", "key": "k"}]), "lookups[0].format", "cannot tell"),
        (_spec(lookups=[{**LOOKUP, "mode": "append"}]), "lookups[0].mode", "unknown key"),
    ],
)
def test_every_lookup_mistake_is_a_spec_error_naming_its_path(doc: dict[str, Any], path: str, words: str) -> None:
    err = _error(doc)
    assert err.path == path
    assert words in err.message


def test_a_remote_spec_may_not_read_the_environment_in_a_lookup_url() -> None:
    from firefeed.secrets.references import SpecOrigin, check_spec

    spec = parse_spec(_spec(lookups=[{**LOOKUP, "url": "https://x.example/c.csv?k=${HOME}"}]))
    with pytest.raises(SpecError) as info:
        check_spec(spec, SpecOrigin.REMOTE, "")
    assert info.value.path == "lookups[0].url"


def _rule(action: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "r", "then": [action]}]


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        (_spec(rules=_rule({"aggregate": "n", "op": "count"})), "rules[0].then[0].aggregate", "top-level `group`"),
        (
            _spec(rules=[{"when": {"not": {"group_first": "true"}}, "then": [{"exclude": "true"}]}]),
            "rules[0].when.not.group_first",
            "top-level `group`",
        ),
        (
            _spec(exports=[{"name": "e", "format": "csv", "path": "e.csv", "where": {"group_first": "true"}}]),
            "exports[0].where.group_first",
            "top-level `group`",
        ),
        (_spec(group="g", rules=_rule({"aggregate": "n", "op": "avg"})), "rules[0].then[0].op", "must be one of"),
        (_spec(group="g", rules=_rule({"aggregate": "n", "op": "min"})), "rules[0].then[0].of", "required"),
        (
            _spec(group="g", rules=_rule({"aggregate": "n", "op": "sum", "of": "p", "round": "-1"})),
            "rules[0].then[0].round",
            "whole number",
        ),
        (_spec(group="g", rules=_rule({"aggregate": "id", "op": "count"})), "rules[0].then[0].aggregate", "key field"),
        (
            _spec(group="g", rules=_rule({"aggregate": "n", "op": "first", "of": "{a"})),
            "rules[0].then[0].of",
            "lone",
        ),
        (
            _spec(group="g", rules=_rule({"aggregate": "n", "op": "count", "by": "x"})),
            "rules[0].then[0].by",
            "unknown key",
        ),
        (_spec(group="g", rules=[{"when": {"group_first": "maybe"}}]), "rules[0].when.group_first", "true or false"),
    ],
)
def test_every_group_mistake_is_a_spec_error_naming_its_path(doc: dict[str, Any], path: str, words: str) -> None:
    err = _error(doc)
    assert err.path == path
    assert words in err.message


def test_of_without_a_brace_names_a_field_and_with_one_is_a_template() -> None:
    from firefeed.rules.groups import Aggregate

    spec = parse_spec(
        _spec(
            group="g",
            rules=[
                *_rule({"aggregate": "n", "op": "join", "of": "Variant Price"}),
                {"name": "t", "then": [{"aggregate": "m", "op": "join", "of": "{a}-{b}", "separator": ""}]},
            ],
        )
    )
    named, templated = spec.parsed_rules[0].then[0], spec.parsed_rules[1].then[0]
    assert isinstance(named, Aggregate) and isinstance(templated, Aggregate)
    assert named.of is not None and named.of.fields == ("Variant Price",) and named.separator == ","
    assert templated.of is not None and templated.of.fields == ("a", "b") and templated.separator == ""
    assert spec.parsed_rules[0].uses_groups
