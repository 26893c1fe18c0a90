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
