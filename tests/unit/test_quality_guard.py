"""The quality options of an export and the publish checks, without a database."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import ChannelRejectError, DropGuardError, SpecError
from firefeed.export.guard import check_publish, percent
from firefeed.spec.loader import parse_spec


def _spec(*exports: dict[str, Any]) -> Any:
    return parse_spec(
        {
            "company": "acme",
            "project": "p",
            "sources": [{"name": "main", "url": "main.csv"}],
            "exports": list(exports),
        }
    )


def _entry(
    name: str,
    *,
    previous: int | None,
    removed: int,
    findings: list[dict[str, Any]] | None = None,
    items: int = 10,
    invalid: int | None = None,
) -> dict:
    entry: dict[str, Any] = {
        "name": name,
        "bytes": 100,  # a written file's size, as every RunReport entry has it (the run's byte bound reads it)
        "diff": {"baseline": previous is not None, "previous": previous, "removed": removed},
        "diagnostics": None,
    }
    if findings is not None:
        if invalid is None:  # each error finding on items of its own
            invalid = sum(f["count"] for f in findings if f["severity"] == "error")
        entry["diagnostics"] = {"channel": "google", "findings": findings, "items": items, "invalid": invalid}
    return entry


def test_an_exports_channel_defaults_to_google_for_google_xml_only() -> None:
    spec = _spec(
        {"name": "g", "format": "google-xml", "path": "g.xml"},
        {"name": "c", "format": "csv", "path": "c.csv"},
        {"name": "m", "format": "tsv", "path": "m.tsv", "channel": "meta"},
        {"name": "off", "format": "google-xml", "path": "o.xml", "channel": "none"},
    )
    assert [e.resolved_channel for e in spec.exports] == ["google", None, "meta", None]
    assert [e.max_drop for e in spec.exports] == [50.0, 50.0, 50.0, 50.0]


@pytest.mark.parametrize(("written", "value"), [("50%", 50.0), ("12.5 %", 12.5), ("0", 0.0), ("100%", 100.0)])
def test_max_drop_reads_a_percentage_with_or_without_the_sign(written: str, value: float) -> None:
    assert _spec({"name": "c", "format": "csv", "path": "c.csv", "max_drop": written}).exports[0].max_drop == value


@pytest.mark.parametrize("written", ["-1%", "101", "half", ""])
def test_a_max_drop_outside_0_to_100_percent_is_a_spec_error_naming_the_key(written: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec({"name": "c", "format": "csv", "path": "c.csv", "max_drop": written})
    assert err.value.path == "exports[0].max_drop"
    assert "must be a percentage between 0% and 100%" in err.value.message


def test_percentages_print_without_useless_decimals() -> None:
    assert [percent(x) for x in (50.0, 12.5, 60.04, 0.0)] == ["50%", "12.5%", "60%", "0%"]


def test_the_guard_blocks_a_drop_over_max_drop_and_accept_drop_lets_it_through() -> None:
    spec = _spec({"name": "g", "format": "csv", "path": "g.csv"})
    exports = [_entry("g", previous=1000, removed=600)]
    with pytest.raises(DropGuardError) as err:
        check_publish(spec, exports, accept_drop=False)
    assert err.value.message == (
        "export 'g': 600 of 1000 items would be dropped (60% > max_drop 50%); "
        "re-run with --accept-drop to publish anyway"
    )
    assert err.value.exports == ["g"]
    assert exports[0]["diff"]["drop"] == {"share": 60.0, "max_drop": 50.0, "status": "blocked"}
    check_publish(spec, exports, accept_drop=True)
    assert exports[0]["diff"]["drop"]["status"] == "accepted"


def test_exactly_max_drop_and_a_first_publish_pass_the_guard() -> None:
    spec = _spec({"name": "g", "format": "csv", "path": "g.csv"}, {"name": "new", "format": "csv", "path": "n.csv"})
    exports = [_entry("g", previous=10, removed=5), _entry("new", previous=None, removed=0)]
    check_publish(spec, exports, accept_drop=False)
    assert exports[0]["diff"]["drop"]["status"] == "ok"
    assert "drop" not in exports[1]["diff"]


def test_fail_on_error_ignores_warnings_and_accept_drop_does_not_answer_channel_errors() -> None:
    spec = _spec({"name": "g", "format": "google-xml", "path": "g.xml", "fail_on": "error"})
    warning = {"severity": "warning", "check": "too_long", "count": 2, "samples": ["A"], "message": "title: long"}
    error = {"severity": "error", "check": "url", "count": 3, "samples": ["B", "C"], "message": "link: not a URL"}
    check_publish(spec, [_entry("g", previous=None, removed=0, findings=[warning])], accept_drop=False)
    with pytest.raises(ChannelRejectError) as err:
        check_publish(spec, [_entry("g", previous=None, removed=0, findings=[warning, error])], accept_drop=True)
    assert "3 item(s) link: not a URL (e.g. B, C)" in err.value.message
    assert "title" not in err.value.message


def test_a_drop_and_a_channel_error_in_two_exports_make_one_drop_guard_error_naming_both() -> None:
    spec = _spec(
        {"name": "a", "format": "google-xml", "path": "a.xml", "fail_on": "warning"},
        {"name": "b", "format": "csv", "path": "b.csv", "max_drop": "10%"},
    )
    warning = {"severity": "warning", "check": "too_long", "count": 1, "samples": ["A"], "message": "title: long"}
    with pytest.raises(DropGuardError) as err:
        check_publish(
            spec,
            [_entry("a", previous=5, removed=0, findings=[warning]), _entry("b", previous=10, removed=2)],
            accept_drop=False,
        )
    assert err.value.exports == ["a", "b"]
    assert err.value.message.startswith("export 'b': 2 of 10 items would be dropped (20% > max_drop 10%)")
    assert "export 'a': google warns about items (1 item(s) title: long (e.g. A))" in err.value.message


def test_max_invalid_blocks_over_its_share_only_and_accept_invalid_answers_it() -> None:
    spec = _spec({"name": "g", "format": "google-xml", "path": "g.xml"})  # max_invalid 5%
    error = {"severity": "error", "check": "gtin", "count": 5, "samples": ["B"], "message": "gtin: bad"}
    at_limit = _entry("g", previous=None, removed=0, findings=[error], items=100)
    assert check_publish(spec, [at_limit], accept_drop=False) == []
    assert at_limit["diagnostics"]["max_invalid"] == {"share": 5.0, "max_invalid": 5.0, "status": "ok"}
    over = _entry("g", previous=None, removed=0, findings=[{**error, "count": 6}], items=100)
    with pytest.raises(ChannelRejectError) as err:
        check_publish(spec, [over], accept_drop=True)
    assert err.value.message.startswith("export 'g': 6 of 100 items (6%) have errors google rejects")
    assert over["diagnostics"]["max_invalid"]["status"] == "blocked"
    accepted = _entry("g", previous=None, removed=0, findings=[{**error, "count": 6}], items=100)
    assert check_publish(spec, [accepted], accept_drop=False, accept_invalid=True) == []
    assert accepted["diagnostics"]["max_invalid"]["status"] == "accepted"
