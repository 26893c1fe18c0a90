"""A spec holds at most spec_max_sources sources, spec_max_lookups lookups, spec_max_exports exports, and
spec_max_fields fields an export names or the rules write: past one, a spec error names the entry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from firefeed.config import reset_settings
from firefeed.errors import SpecError
from firefeed.spec.loader import parse_spec


@pytest.fixture(autouse=True)
def small_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("SOURCES", "LOOKUPS", "EXPORTS", "FIELDS"):
        monkeypatch.setenv(f"FIREFEED_SPEC_MAX_{name}", "3")
    reset_settings()
    yield
    reset_settings()


def spec(
    *, sources: int = 1, lookups: int = 0, exports: int = 1, fields: int = 1, rules: Any = (), channel: Any = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "company": "acme",
        "project": "p",
        "sources": [{"name": f"s{i}", "url": f"s{i}.csv"} for i in range(sources)],
        "lookups": [{"name": f"l{i}", "url": f"l{i}.csv", "key": "id"} for i in range(lookups)],
        "rules": list(rules),
        "exports": [
            {"name": f"e{i}", "format": "csv", "path": f"e{i}.csv", "fields": {f"f{k}": "id" for k in range(fields)}}
            for i in range(exports)
        ],
    }
    if channel is not None:
        doc["exports"][0]["rules"] = channel
    return doc


def refused(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    return info.value


def sets(*fields: str) -> list[dict[str, Any]]:
    return [{"name": f"set {f} ({i})", "then": [{"set": f, "value": "x"}]} for i, f in enumerate(fields)]


def test_a_spec_at_every_limit_validates() -> None:
    parse_spec(spec(sources=3, lookups=3, exports=3, fields=3, rules=sets("a", "b", "a", "c")))


@pytest.mark.parametrize("what", ["sources", "lookups", "exports"])
def test_one_entry_past_its_limit_is_refused_naming_it(what: str) -> None:
    err = refused(spec(**{what: 4}))
    assert err.path == f"{what}[3]"
    assert err.detail == f"the spec holds 4 {what}; at most 3 are supported (spec_max_{what})"


def test_an_export_naming_too_many_fields_is_refused() -> None:
    err = refused(spec(fields=4))
    assert err.path == "exports[0].fields"
    assert err.detail == "names 4 fields ('f3' is number 4); at most 3 are supported (spec_max_fields)"


def test_the_rule_that_writes_one_field_too_many_is_named() -> None:
    err = refused(spec(rules=sets("a", "b", "a", "c", "d")))
    assert err.path == "rules[4]"
    assert err.detail.startswith("rule 'set d (4)' writes 'd', field number 4 that the rules write;")


def test_channel_rules_count_with_the_fields_the_projects_rules_write() -> None:
    parse_spec(spec(rules=sets("a", "b"), channel=sets("a", "c")))
    err = refused(spec(rules=sets("a", "b"), channel=sets("c", "d")))
    assert err.path == "exports[0].rules[1]"
    assert "field number 4 that the project's and this export's rules together write" in err.detail
