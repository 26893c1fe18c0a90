"""Rules that could grow a value without bound are a spec error naming the rule (rules/value_growth.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from firefeed.errors import SpecError
from firefeed.rules.groups import JOIN_MAX_CHARS
from firefeed.rules.model import parse_rules
from firefeed.rules.value_growth import REFERENCE_BYTES, check_value_growth
from firefeed.spec.model import ProjectSpec
from tests.properties import examples
from tests.unit.test_rules_sql_unchanged import ROOT


def _times(raw: list[dict[str, Any]], limit: float = 64, **parse: Any) -> dict[str, float]:
    bounds = check_value_growth(parse_rules(raw, key_field="id", **parse), limit).bounds
    return {name: b / REFERENCE_BYTES for name, b in bounds.items()}


def _doubling(n: int) -> list[dict[str, Any]]:
    return [{"then": [{"set": "d", "value": "{d}{d}"}]} for _ in range(n)]


def test_a_value_that_holds_itself_twice_is_refused_at_the_rule_that_passes_the_limit() -> None:
    assert _times(_doubling(6))["d"] == 64
    with pytest.raises(SpecError) as err:
        _times(_doubling(16))
    assert err.value.path == "rules[6]"
    assert "'d'" in err.value.detail and "128 times" in err.value.detail


def test_a_doubling_chain_past_a_floats_range_in_one_rule_is_a_spec_error() -> None:
    # 1,100 doublings in one branch: the bound is an exact integer too large to divide as a float.
    with pytest.raises(SpecError) as err:
        _times([{"then": [{"set": "d", "value": "{d}{d}"}] * 1100}])
    assert err.value.path == "rules[0]"
    assert "more than 1e308 times" in err.value.detail


def test_the_benchmark_rules_and_the_everyday_templates_stay_far_below_the_limit() -> None:
    bench = yaml.load((ROOT / "bench" / "bench_rules.yaml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert max(_times(bench).values()) < 3
    everyday = [
        {"then": [{"set": "title", "value": "{brand} {title} {color} {size}"}]},
        {"then": [{"append": "description", "value": " Colour: {color}."}]},
        {"then": [{"regex_replace": "description", "pattern": "<br\\s*/?>", "with": "\n"}]},
        {"then": [{"regex_replace": "description", "pattern": "\\s+", "with": " "}]},
        {"then": [{"replace": "description", "find": "&nbsp;", "with": " "}]},
        {"then": [{"uppercase": "brand"}, {"math": "price", "op": "multiply", "value": "1.22"}]},
    ]
    times = _times(everyday)
    assert times["title"] == pytest.approx(4, abs=0.01)
    assert times["description"] == pytest.approx(2, abs=0.01)  # its own text and the colour's
    assert times["brand"] == 1.5


@pytest.mark.parametrize(
    ("action", "times"),
    [
        # every "a" may become 100 "b"s
        ({"replace": "d", "find": "a", "with": "b" * 100}, 100),
        # a pattern that may match nothing inserts its text between any two characters
        ({"regex_replace": "d", "pattern": "x*", "with": "yy"}, 4),
        # a list of one-character elements, each mapped to a 300-byte text
        ({"map": "tags", "values": {"a": "z" * 300}}, (REFERENCE_BYTES / 2 + 1) * 301 / REFERENCE_BYTES),
        # ... or to a field's value: counted once (the module's docstring says why)
        ({"map": "tags", "values": {"a": "{other}"}}, (REFERENCE_BYTES / 2 + 1 + REFERENCE_BYTES) / REFERENCE_BYTES),
    ],
)
def test_an_action_that_lengthens_its_field_multiplies_its_bound(action: dict[str, Any], times: float) -> None:
    one = [{"then": [action]}]
    lists = frozenset({"tags"})
    got = _times(one, limit=10**6, declared_lists=lists)[action.get("replace") or action.get("regex_replace") or "tags"]
    assert got == pytest.approx(times, rel=0.01)
    if times > 64:
        with pytest.raises(SpecError):
            _times(one, declared_lists=lists)


def test_element_wise_actions_on_a_list_keep_its_element_count() -> None:
    # A map or math changes each element and adds none: the next one multiplies the same count,
    # not one estimated from the bytes the first made (two maps were refused at 99x).
    n = REFERENCE_BYTES / 2 + 1
    maps = [
        {"then": [{"map": "sizes", "values": {"S": "Small (EU 36-38)", "M": "Medium (EU 40-42)"}}]},
        {"then": [{"map": "sizes", "values": {"Small (EU 36-38)": "Small (EU 36-38) slim"}}]},
    ]
    lists = frozenset({"sizes"})
    assert _times(maps, declared_lists=lists)["sizes"] == pytest.approx(n * 22 / REFERENCE_BYTES, rel=0.01)
    math = [{"then": [{"math": "sizes", "op": op, "value": v}]} for op, v in [("multiply", "1.22"), ("add", "4.99")]]
    assert _times(math + math, declared_lists=lists)["sizes"] < 64
    # once another action may add elements, the count is read from the bytes again
    split = [maps[0], {"then": [{"append": "sizes", "value": "x"}]}, maps[1]]
    assert _times(split, limit=10**6, declared_lists=lists)["sizes"] > 64
    with pytest.raises(SpecError):
        _times(split, declared_lists=lists)


def test_a_long_literal_counts_like_a_long_value() -> None:
    with pytest.raises(SpecError) as err:
        _times([{"then": [{"set": "ok", "value": "fine"}]}, {"then": [{"append": "d", "value": "x" * (70 << 16)}]}])
    assert err.value.path == "rules[1]"


def test_an_aggregate_join_counts_its_cap_and_a_when_keeps_the_larger_branch() -> None:
    raw = [
        {"then": [{"aggregate": "all", "op": "join", "of": "title"}]},
        {
            "when": {"field": "title", "op": "eq", "value": "x"},
            "then": [{"set": "t", "value": "{all}{all}"}],
            "else": [{"set": "t", "value": "short"}],
        },
    ]
    times = _times(raw, group="grp")
    assert times["all"] == 4 * JOIN_MAX_CHARS / REFERENCE_BYTES
    assert times["t"] == 2 * times["all"]


def _spec(*, source: dict[str, Any] | None = None, **parts: Any) -> dict[str, Any]:
    """A spec document: one csv source (with `source`'s keys), one export unless `parts` gives them."""
    return {
        "company": "acme",
        "project": "grow",
        "sources": [{"name": "feed", "url": "feed.csv", **(source or {})}],
        "exports": [{"name": "a", "format": "csv", "path": "a.csv"}],
        **parts,
    }


def _refused(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as err:
        ProjectSpec.model_validate(doc)
    return err.value


def test_channel_rules_continue_from_what_the_project_rules_leave() -> None:
    doc = _spec(
        rules=_doubling(5),
        exports=[
            {"name": "a", "format": "csv", "path": "a.csv"},
            {"name": "b", "format": "csv", "path": "b.csv", "rules": _doubling(2)},
        ],
    )
    assert _refused(doc).path == "exports[1].rules[1]"
    doc["exports"][1]["rules"] = _doubling(1)
    assert ProjectSpec.model_validate(doc).exports[1].rules is not None


def test_an_export_field_template_that_names_a_field_too_often_is_refused() -> None:
    doc = _spec(
        rules=_doubling(3),
        exports=[{"name": "a", "format": "csv", "path": "a.csv", "fields": {"id": "id", "t": "{d}" * 9}}],
    )
    err = _refused(doc)
    assert err.path == "exports[0].fields.t" and "72 times" in err.detail
    doc["exports"][0]["fields"]["t"] = "{d} {d}"
    assert ProjectSpec.model_validate(doc).exports[0].fields == {"id": "id", "t": "{d} {d}"}


def test_a_key_from_template_is_bounded_like_the_rules() -> None:
    doc = _spec(source={"key_from": "{sku}" * 65})
    err = _refused(doc)
    assert err.path == "sources[0].key_from" and "65 times" in err.detail
    doc["sources"][0]["key_from"] = "{sku}-{size}"
    assert ProjectSpec.model_validate(doc).sources[0].key_from == "{sku}-{size}"


def _self_map() -> dict[str, Any]:
    return {"then": [{"map": "tags", "values": {"zzz": "zzz"}, "default": "{tags}"}]}


def test_maps_that_read_what_an_earlier_map_made_count_it_per_element() -> None:
    # Each map puts the whole list into every element: n elements become n * n, then n^3 ... The
    # once-per-element allowance of a map's reads is taken once along a chain, never again.
    lists = frozenset({"tags"})
    assert _times([_self_map()], declared_lists=lists)["tags"] < 4
    with pytest.raises(SpecError) as err:
        _times([_self_map(), _self_map()], declared_lists=lists)
    assert err.value.path == "rules[1]"
    # ... through another field too: the copy holds the first map's result
    via_copy = [
        _self_map(),
        {"then": [{"set": "all", "value": "{tags}"}]},
        {"then": [{"map": "sizes", "values": {"S": "s"}, "default": "{all}"}]},
    ]
    with pytest.raises(SpecError):
        _times(via_copy, declared_lists=frozenset({"tags", "sizes"}))


def test_a_map_reading_a_field_no_map_grew_counts_it_once() -> None:
    # P11: a default that reads a value the run read (or a plain rule made) stays usable, twice over
    lists = frozenset({"sizes"})
    maps = [
        {"then": [{"set": "brand", "value": "{brand} {vendor}"}]},
        {"then": [{"map": "sizes", "values": {"S": "Small"}, "default": "{sizes[0]}?"}]},
        {"then": [{"map": "colors", "values": {"r": "red"}, "default": "{brand}"}]},
    ]
    assert max(_times(maps, declared_lists=lists | {"colors"}).values()) < 8


def test_channel_rules_see_what_the_project_maps_left_loose() -> None:
    doc = _spec(
        rules=[_self_map()],
        exports=[{"name": "a", "format": "csv", "path": "a.csv", "rules": [_self_map()]}],
    )
    doc["sources"][0]["lists"] = {"tags": ","}
    assert _refused(doc).path == "exports[0].rules[0]"


_ESCAPES = [("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;")]


@pytest.mark.parametrize("one_rule", [True, False])
def test_escaping_characters_grows_a_field_by_the_longest_escape_not_their_product(one_rule: bool) -> None:
    """`&`, `<`, `>` and `"` escaped in turn: no escape holds a character a later step replaces, so the
    field grows by 6x (`&quot;`), where multiplying the steps said 5 x 4 x 4 x 6 = 480x (refused)."""
    actions = [{"replace": "description", "find": f, "with": w} for f, w in _ESCAPES]
    raw = [{"then": actions}] if one_rule else [{"then": [a]} for a in actions]
    assert _times(raw)["description"] == 6


def test_a_replace_whose_text_a_later_one_replaces_compounds() -> None:
    # `&` becomes `&amp;`, whose `a` then becomes four: 8 bytes for the `&`, 4 for any other `a`.
    raw = [{"then": [{"replace": "d", "find": "&", "with": "&amp;"}, {"replace": "d", "find": "a", "with": "aaaa"}]}]
    assert _times(raw)["d"] == 8
    # A character that holds itself twice doubles at every step, as a template would.
    doubling = [{"then": [{"replace": "d", "find": "a", "with": "aa"}]} for _ in range(7)]
    with pytest.raises(SpecError) as err:
        _times(doubling)
    assert err.value.path == "rules[6]" and "128 times" in err.value.detail


def test_a_when_or_another_action_on_the_field_ends_the_chain() -> None:
    escape = [{"replace": "d", "find": f, "with": w} for f, w in _ESCAPES[:3]]
    # Under `when`, the next rule's chain starts from what the larger branch left (5x), then 4x.
    guarded = [{"when": {"field": "x", "op": "eq", "value": "1"}, "then": escape[:1]}, {"then": escape[1:]}]
    assert _times(guarded)["d"] == 5 * 4
    # An append between the steps: the chain starts again from the appended bound.
    broken = [{"then": [escape[0], {"append": "d", "value": "!"}, *escape[1:]]}]
    assert _times(broken)["d"] == pytest.approx((5 * REFERENCE_BYTES + 2) * 4 / REFERENCE_BYTES)
    # A multi-character find is bounded step by step, as before.
    multi = [{"then": [{"replace": "d", "find": "ab", "with": "abab"}, *escape[:1]]}]
    assert _times(multi)["d"] == 2 * 5


@settings(max_examples=examples(300), deadline=None)
@given(
    # Up to 40 steps and texts up to 20 characters: chains that restart at their caps, and texts past them.
    steps=st.lists(
        st.tuples(st.sampled_from("ab&<é"), st.text(alphabet="ab&<é;x", max_size=20)), min_size=1, max_size=40
    ),
    text=st.text(alphabet="ab&<é;xy", min_size=1, max_size=30),
)
def test_a_chain_of_one_character_replaces_never_grows_a_value_past_its_bound(
    steps: list[tuple[str, str]], text: str
) -> None:
    """What `replace` does in SQL (every occurrence, left to right) done in Python: the bytes a value
    becomes are at most its bytes times the chain's bound over REFERENCE_BYTES."""
    raw = [{"then": [{"replace": "d", "find": f, "with": w}]} for f, w in steps]
    try:
        growth = _times(raw, limit=1e12)["d"]
    except SpecError:
        # 40 steps that each multiply can pass the limit: such a spec is refused, nothing of it runs.
        assume(False)
    value = text
    for find, with_ in steps:
        value = value.replace(find, with_)
    assert len(value.encode()) <= growth * len(text.encode()) + 1e-9


def test_an_aggregate_reads_the_values_as_its_rule_started() -> None:
    """Emptying `d` before the aggregate in the same branch does not empty what the aggregate reads."""
    raw = [{"then": [{"set": "d", "value": ""}, {"aggregate": "e", "op": "first", "of": "d"}]}]
    assert _times(raw, group="g")["e"] == 1
    with pytest.raises(SpecError) as err:
        _times([*raw, *({"then": [{"set": "e", "value": "{e}{e}"}]} for _ in range(7))], group="g")
    assert err.value.path == "rules[7]"


@pytest.mark.parametrize("then", [{"replace": "d", "find": "&", "with": "x"}, {"uppercase": "d"}])
def test_a_bound_past_a_floats_range_is_a_spec_error_whatever_comes_next(then: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as err:
        _times([{"then": [{"set": "d", "value": "{d}{d}"}] * 1100 + [then]}])
    assert "more than 1e308 times" in err.value.detail
