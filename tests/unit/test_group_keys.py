"""The grouped pass's group value, computed once by the pass that writes its input (`_plan._group_keys`)."""

from __future__ import annotations

from typing import Any

from psycopg2 import sql

from firefeed.rules._plan import GROUP_TEXT_COLUMN, plan_passes
from firefeed.rules.model import parse_rules
from firefeed.rules.sqlgen import groups_select, pass_select

FIELDS = ["id", "title", "price", "variant"]
SET_TITLE = {"name": "title", "then": [{"set": "title", "value": "x"}]}
CHEAP_OUT = {"name": "cheap", "when": {"field": "price", "op": "lt", "value": "5"}, "then": [{"exclude": True}]}
LOWEST = {"name": "lowest", "then": [{"aggregate": "low", "op": "min", "of": "price"}]}


def _plans(raw: list[dict[str, Any]]) -> list[Any]:
    return plan_passes(parse_rules(raw, key_field="id", group="variant"), FIELDS)


def test_the_writer_of_a_grouped_pass_input_keys_it_through_a_delete_in_place() -> None:
    writer, delete, grouped = _plans([SET_TITLE, CHEAP_OUT, LOWEST])
    assert (writer.keys_group, delete.keys_group, grouped.keys_group) == ("variant", "variant", None)
    assert (writer.keyed_input, delete.keyed_input, grouped.keyed_input) == (False, False, True)
    assert (GROUP_TEXT_COLUMN, "text") in writer.extra()
    assert all(c != GROUP_TEXT_COLUMN for c, _ in grouped.extra())


def test_a_grouped_first_pass_computes_its_group_value_itself() -> None:
    (grouped,) = _plans([LOWEST])
    assert not grouped.keyed_input and grouped.keys_group is None


def test_a_writer_that_changes_the_group_in_its_last_level_leaves_the_grouped_pass_unkeyed() -> None:
    renamed = {"name": "regroup", "then": [{"set": "variant", "value": "{title}"}]}
    writer, grouped = _plans([renamed, LOWEST])
    assert writer.keys_group is None and not grouped.keyed_input


def _sql(frag: Any) -> str:
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, sql.Composed):
            for n in node.seq:
                walk(n)
        elif isinstance(node, sql.SQL):
            parts.append(node.string)
        elif isinstance(node, sql.Identifier):
            parts.append(".".join(f'"{s}"' for s in node.strings))
        else:
            parts.append("%s")

    walk(frag.sql)
    return "".join(parts)


def test_the_keyed_grouped_pass_joins_on_the_column_and_the_writer_writes_it_last() -> None:
    writer, _delete, grouped = _plans([SET_TITLE, CHEAP_OUT, LOWEST])
    source, groups = sql.Identifier("s", "src"), sql.Identifier("s", "groups")
    written = _sql(pass_select(writer, source))
    assert written.endswith(f'AS "{GROUP_TEXT_COLUMN}" FROM "s"."src" AS t')
    joined = _sql(pass_select(grouped, source, groups=groups))
    assert f'"_ff_gk" = t."{GROUP_TEXT_COLUMN}"' in joined
    assert "OFFSET 0) AS t LEFT JOIN" not in joined  # no barrier computing the value per item
    assert f'"{GROUP_TEXT_COLUMN}" AS "_ff_g"' in _sql(groups_select(grouped, [source]))
