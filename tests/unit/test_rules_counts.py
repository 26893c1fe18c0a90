"""A spec holds at most spec_max_rules rules and MAX_ACTIONS actions, project and channel rules together;
one at the caps validates, and a plan far past the SQL cap is measured only up to the pass that crosses it."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.config import Settings
from firefeed.errors import SpecError
from firefeed.rules import limits
from firefeed.rules._plan import plan_passes
from firefeed.rules.limits import MAX_ACTIONS, check_sql_size
from firefeed.rules.model import parse_rules
from firefeed.spec.loader import parse_spec

MAX_RULES: int = Settings.model_fields["spec_max_rules"].default


def rule(i: int, actions: int = 1) -> dict[str, Any]:
    """A conditional rule rewriting two fields every rule shares (the plan stays small)."""
    then = [{"append": "title", "value": " x"} if k % 2 else {"set": "label", "value": f"v{i}"} for k in range(actions)]
    return {"when": {"field": "brand", "op": "eq", "value": f"b{i}"}, "then": then}


def spec(project: list[dict[str, Any]], channel: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    export: dict[str, Any] = {"name": "google", "format": "csv", "path": "google.csv"}
    if channel is not None:
        export["rules"] = channel
    return {
        "company": "acme",
        "project": "p",
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": project,
        "exports": [{"name": "plain", "format": "csv", "path": "plain.csv"}, export],
    }


def refused(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    return info.value


def test_one_rule_over_the_cap_is_refused_naming_the_rules_and_the_count() -> None:
    err = refused(spec([rule(i) for i in range(MAX_RULES + 1)]))
    assert err.path == "rules"
    assert err.detail == (
        f"the spec holds {MAX_RULES + 1} rules (the project's and its exports' rules together); "
        f"at most {MAX_RULES} are supported (spec_max_rules)"
    )


def test_channel_rules_count_with_the_projects_and_the_path_names_the_list_that_crosses() -> None:
    err = refused(spec([rule(i) for i in range(600)], [rule(i) for i in range(401)]))
    assert err.path == "exports[1].rules"
    assert f"holds {MAX_RULES + 1} rules" in err.detail and f"at most {MAX_RULES}" in err.detail


def test_actions_over_the_cap_are_refused_even_in_few_rules() -> None:
    per = MAX_ACTIONS // 4 + 1  # four rules, one action too many
    err = refused(spec([rule(i, per) for i in range(2)], [rule(i, per) for i in range(2)]))
    assert err.path == "exports[1].rules"
    assert err.detail == (
        f"the spec holds {4 * per} actions (the project's and its exports' rules together); "
        f"at most {MAX_ACTIONS} are supported"
    )


def test_a_lone_action_and_the_else_branch_count_too() -> None:
    five = {"then": [{"set": "label", "value": "x"}] * 4, "else": [{"set": "label", "value": "y"}]}
    lone = {"then": {"set": "label", "value": "x"}, "else": [{"set": "label", "value": "y"}] * 5}
    err = refused(spec([five] * (MAX_RULES - 1), [lone]))  # 999 x 5 + 1 + 5
    assert err.path == "exports[1].rules" and f"holds {MAX_ACTIONS + 1} actions" in err.detail


def test_a_spec_at_both_caps_validates() -> None:
    per = MAX_ACTIONS // MAX_RULES
    project = [rule(i, per) for i in range(MAX_RULES // 2)]
    channel = [rule(i, per) for i in range(MAX_RULES - len(project))]
    parsed = parse_spec(spec(project, channel))
    assert len(parsed.parsed_rules) + len(parsed.exports[1].parsed_rules) == MAX_RULES
    assert sum(len(r.then) for r in (*parsed.parsed_rules, *parsed.exports[1].parsed_rules)) == MAX_ACTIONS


def test_a_plan_far_past_the_sql_cap_is_measured_only_up_to_the_pass_that_crosses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every excluding rule is a pass of its own, and each pass lists every column.
    raw = [{"when": {"field": "brand", "op": "eq", "value": f"b{i}"}, "then": [{"exclude": True}]} for i in range(200)]
    rules = parse_rules(raw, key_field="id")
    fields = ["id", "brand", *(f"c{i}" for i in range(100))]
    measured: list[int] = []
    plan_bytes = limits.plan_bytes
    monkeypatch.setattr(limits, "plan_bytes", lambda plans: measured.append(len(plans)) or plan_bytes(plans))
    one_pass = plan_bytes(plan_passes(rules[:1], fields))
    with pytest.raises(SpecError) as info:
        check_sql_size(rules, fields, 10 * one_pass)
    crossing = int(info.value.path.removeprefix("rules[").removesuffix("]"))
    assert 8 <= crossing <= 10  # about ten passes fit (later ones name longer flags and values)
    assert "would need at least" in info.value.detail
    assert measured == [1] * (crossing + 1)  # each pass up to the crossing one, none of the 190 after it
