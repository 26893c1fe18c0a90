"""The CLI's lookup lines: counts per action and the top unmatched values, never cut without saying so."""

from __future__ import annotations

from firefeed.cli import format_lookups


def _action(values: list[tuple[str, int]]) -> dict[str, object]:
    return {
        "rule": "gpc",
        "action": "then[0]",
        "lookup": "cats",
        "matched": 5,
        "unmatched": sum(n for _, n in values),
        "unmatched_values": [{"value": v, "count": n} for v, n in values],
    }


def test_the_table_shows_ten_values_and_says_how_many_more_the_report_lists() -> None:
    values = [(f"cat {i}", 20 - i) for i in range(14)]
    lines = format_lookups([_action(values)], [])
    assert lines[0] == "  lookup cats in 'gpc' then[0]: 5 matched, 189 unmatched"
    assert lines[1].startswith("    unmatched: cat 0 (20), cat 1 (19), ")
    assert "cat 9 (11), and 4 more in the report" in lines[1] and "cat 10" not in lines[1]


def test_an_empty_value_and_a_long_one_are_marked() -> None:
    lines = format_lookups([_action([("", 3), ("x" * 60, 1)])], [])
    assert lines[1] == f"    unmatched: (empty) (3), {'x' * 39}… (1)"
    assert "more in the report" not in lines[1]


def test_lookup_tables_list_their_rows_and_skipped_keys() -> None:
    table = {
        "name": "cats",
        "rows": 2000,
        "keys": 1998,
        "skipped": {"empty_key": 1, "duplicate_key": 1, "malformed": 0},
    }
    assert format_lookups([], [table]) == [
        "",
        "  lookup cats: 2,000 rows, 1,998 keys, 1 empty key, 1 dup key, 0 malformed",
    ]
