"""What the kept result tells of how the rules counted an item no pass excluded (delta_rules.survivor_counts):
known only when every flag a count needs is a column of the last pass table (#52)."""

from __future__ import annotations

from typing import Any

from firefeed.pipeline.delta_rules import survivor_counts
from firefeed.rules._plan import PassPlan, flag_column, plan_passes
from firefeed.rules.model import parse_rules
from firefeed.rules.sqlgen import deletes_only
from firefeed.schema.identifiers import KEY, ORD, SRC

FIELDS = ["id", "title", "stock", "brand"]


def plans(raw: list[dict[str, Any]]) -> list[PassPlan]:
    return plan_passes(parse_rules(raw, key_field="id"), FIELDS)


def last_table_columns(passes: list[PassPlan]) -> list[str]:
    """The columns of the last pass table a run writes (a DELETE pass keeps its table), as the kept result has."""
    written = [p for i, p in enumerate(passes) if i == 0 or not deletes_only(p)][-1]
    return [ORD, KEY, SRC, *written.columns(), *(c for c, _ in written.extra())]


SET_LOW = {
    "name": "low",
    "when": {"field": "stock", "op": "eq", "value": "0"},
    "then": [{"set": "title", "value": "x"}],
}
ALWAYS = {"name": "tidy", "then": [{"trim": "title"}]}
EXCLUDE = {"name": "gone", "when": {"field": "brand", "op": "empty"}, "then": [{"exclude": True}]}
KEEP_ONLY = {
    "name": "only",
    "when": {"field": "brand", "op": "eq", "value": "b"},
    "then": [{"set": "title", "value": "b"}],
    "else": [{"exclude": True}],
}
LATER = {
    "name": "later",
    "when": {"field": "title", "op": "contains", "value": "x"},
    "then": [{"set": "brand", "value": "y"}],
}


def test_rules_then_an_exclusion_are_known_from_the_flags_of_the_one_table_written() -> None:
    passes = plans([SET_LOW, ALWAYS, EXCLUDE])
    assert survivor_counts(passes, last_table_columns(passes)) == {
        "low": flag_column(passes[0].rules[0]),
        "tidy": True,
        "gone": False,  # no item it kept matched it
    }


def test_an_exclusion_by_else_counts_the_items_it_kept() -> None:
    passes = plans([KEEP_ONLY])
    assert survivor_counts(passes, last_table_columns(passes)) == {"only": True}


def test_a_flag_of_an_earlier_pass_table_is_not_known() -> None:
    # The exclusion starts a pass that writes a new table (a rule after it writes): `low`'s flag is lost.
    passes = plans([SET_LOW, EXCLUDE, LATER])
    columns = last_table_columns(passes)
    assert flag_column(passes[0].rules[0]) not in columns
    assert survivor_counts(passes, columns) is None
    # Without its flag column, even the one-table plan is not known.
    one = plans([SET_LOW, EXCLUDE])
    assert survivor_counts(one, [c for c in last_table_columns(one) if not c.startswith("_ff_m")]) is None


def test_an_exclusion_of_every_item_is_not_this_case() -> None:
    passes = plans([{"name": "all", "then": [{"exclude": True}]}])
    assert survivor_counts(passes, last_table_columns(passes)) is None
