"""`ignore_case: true` on `matches` and `regex_replace` (#49): Postgres' `~*` reading, in both routes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from firefeed.errors import SpecError
from firefeed.rules._regex import translate
from firefeed.rules._text import simple_lower, simple_upper
from firefeed.rules.model import parse_rules
from tests.integration.test_rules_differential import KEY_FIELD, assert_same


def _cased() -> list[str]:
    return [c for c in map(chr, range(0x110000)) if simple_lower(c) != c or simple_upper(c) != c]


def _candidates(c: str) -> set[str]:
    """The values a case-insensitive pattern of `c` could be expected to match: each case of each case."""
    lo, up = simple_lower(c), simple_upper(c)
    return {c, lo, up, simple_upper(lo), simple_lower(up)}


@pytest.mark.stress  # slow (moved out of `make test` to keep it under 10 minutes): `make stress`
def test_every_cased_character_matches_what_postgres_tilde_star_matches(engine: Engine) -> None:
    # For every character a case mapping changes, as a pattern alone, in a class, in a negated class and
    # as a one-character range: the Python spelling matches exactly the values Postgres' ~* does.
    rows: list[tuple[str, str, str]] = []  # (pg pattern, python pattern, value)
    for c in _cased():
        for pattern in (c, f"[{c}x]", f"[^{c}]", f"[{c}-{c}]"):
            t = translate(pattern, ignore_case=True)
            rows.extend((t.pg, t.py, v) for v in _candidates(c))
    with engine.connect() as conn:
        got = (
            conn.execute(
                text(
                    "SELECT v ~* p FROM unnest(CAST(:p AS text[]), CAST(:v AS text[]))"
                    " WITH ORDINALITY AS t(p, v, n) ORDER BY n"
                ),
                {"p": [r[0] for r in rows], "v": [r[2] for r in rows]},
            )
            .scalars()
            .all()
        )
    want = [re.search(py, v) is not None for _pg, py, v in rows]
    differ = [(rows[i][0], rows[i][2], got[i]) for i in range(len(rows)) if got[i] != want[i]]
    assert len(got) == len(rows) > 10_000
    assert differ == []


def test_a_range_gains_the_cases_of_its_characters_as_postgres_does(engine: Engine) -> None:
    values = ["É", "é", "Ǆ", "ǅ", "ǆ", "S", "s", "ſ", "K", "k", "\u212a", "İ", "i", "I", "ı", "Σ", "σ", "ς", "ß", "ẞ"]
    patterns = ["[à-ê]", "[À-Ê]", "[Ǆ-ǅ]", "[a-z]", "[^a-z]", "[ſ-ſ]", "[ǅ-ǆ]", "[Α-Ω]", "[İ-ı]", "[ẞ]", "ß"]
    rows = [(translate(p, ignore_case=True), v) for p in patterns for v in values]
    with engine.connect() as conn:
        got = [conn.execute(text("SELECT CAST(:v AS text) ~* :p"), {"v": v, "p": t.pg}).scalar() for t, v in rows]
    assert got == [re.search(t.py, v) is not None for t, v in rows]
    assert got[patterns.index("[à-ê]") * len(values)] is True  # 'É' ~* '[à-ê]'


ITEMS = [{KEY_FIELD: str(i), "title": v} for i, v in enumerate(["Été", "été", "ÉTÉ", "ǅa", "Ǆa", "ſS", "x"])]


@pytest.mark.parametrize(
    "rule",
    [
        {
            "when": {"field": "title", "op": "matches", "value": "^été$", "ignore_case": True},
            "then": [{"set": "hit", "value": "y"}],
        },
        {
            "when": {"field": "title", "op": "matches", "value": "ǅ|s", "ignore_case": "true"},
            "then": [{"set": "hit", "value": "y"}],
        },
        {
            "when": {"field": "title", "op": "matches", "value": "é", "ignore_case": False},
            "then": [{"set": "hit", "value": "y"}],
        },
        {"then": [{"regex_replace": "title", "pattern": "[é]|ǅ|s", "with": "_", "ignore_case": True}]},
        {"then": [{"regex_replace": "title", "pattern": "(T)", "with": "<\\1>", "ignore_case": True}]},
    ],
)
def test_sql_route_and_reference_agree_on_ignore_case(engine: Engine, rule: dict[str, Any]) -> None:
    assert_same(engine, ITEMS, [KEY_FIELD, "title"], [rule])


def test_ignore_case_reads_accents_and_titlecase_as_postgres_does() -> None:
    from firefeed.rules.reference import apply_rules

    rules = parse_rules(
        [
            {
                "when": {"field": "title", "op": "matches", "value": "^été$", "ignore_case": True},
                "then": [{"set": "hit", "value": "y"}],
            },
            {"then": [{"regex_replace": "title", "pattern": "ǅ", "with": "_", "ignore_case": True}]},
        ],
        key_field=KEY_FIELD,
    )
    out = apply_rules([dict(i) for i in ITEMS], rules).items
    assert [i.get("hit", "") for i in out] == ["y", "y", "y", "", "", "", ""]
    assert [i["title"] for i in out][3:5] == ["ǅa", "_a"]  # ǅ stands for ǆ and Ǆ, not itself (towlower/towupper)


@pytest.mark.parametrize(
    ("leaf", "message"),
    [
        ({"op": "matches", "value": "a", "ignore_case": True, "case_sensitive": True}, "contradicts case_sensitive"),
        ({"op": "eq", "value": "a", "ignore_case": True}, "is for op matches"),
        ({"op": "matches", "value": "a", "ignore_case": False, "case_sensitive": False}, "contradicts case_sensitive"),
        ({"op": "matches", "value": "a", "ignore_case": "maybe"}, "ignore_case"),
    ],
)
def test_ignore_case_where_it_cannot_be_is_a_spec_error(leaf: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_rules([{"when": {"field": "title", **leaf}, "then": [{"set": "x", "value": "y"}]}], key_field=KEY_FIELD)
    assert err.value.path == "rules[0].when.ignore_case"
    assert message in str(err.value)
