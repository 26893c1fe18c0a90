"""A source's or lookup's headers are checked with the spec: a bad name or a literal line break is a spec error."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.spec.loader import parse_spec


def spec(headers: dict[str, str], where: str = "sources") -> dict[str, Any]:
    feed = {"name": "m", "url": "https://example.com/f.csv", "headers": headers}
    doc: dict[str, Any] = {
        "company": "acme",
        "project": "p",
        "sources": [{"name": "m", "url": "https://example.com/f.csv"}],
        "exports": [{"name": "c", "format": "csv", "path": "o.csv"}],
    }
    if where == "sources":
        doc["sources"] = [feed]
    else:
        doc["lookups"] = [{**feed, "name": "cats", "key": "code"}]
    return doc


@pytest.mark.parametrize("where", ["sources", "lookups"])
@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"X Key": "a"}, "'X Key' is not a valid header name"),
        ({"X-Key": "a\r\nX-Evil: 1"}, "header 'X-Key' has a character not allowed"),
        ({"X-Key": "caf\u00e9"}, "header 'X-Key' has a character not allowed"),
    ],
)
def test_a_bad_header_is_refused_naming_the_headers_key_and_never_showing_the_value(
    where: str, headers: dict[str, str], says: str
) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(spec(headers, where))
    assert err.value.path == f"{where}[0].headers"
    assert says in err.value.detail
    assert "Evil" not in err.value.detail and "caf" not in err.value.detail


def test_a_header_holding_a_reference_is_left_for_the_fetch_to_check_once_expanded() -> None:
    parsed = parse_spec(spec({"Authorization": "Bearer ${secret:feed_token}", "X-Tab": "a\tb"}))
    assert parsed.sources[0].headers["Authorization"] == "Bearer ${secret:feed_token}"
