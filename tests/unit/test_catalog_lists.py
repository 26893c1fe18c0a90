"""Lists meeting groups, lookups and channel rules (SPEC 9: P16, P22, P29) in the spec and the reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from firefeed.errors import SpecError
from firefeed.rules.model import parse_rules
from firefeed.rules.reference import apply_rules
from firefeed.spec.loader import parse_spec

LISTS = frozenset({"images"})


def spec(**top: Any) -> dict[str, Any]:
    source = {"name": "main", "url": "main.csv", "lists": {"images": ","}}
    return {"company": "c", "project": "p", "group": "g", "sources": [source], **top}


def run(rules: list[dict[str, Any]], items: list[dict[str, Any]], **kw: Any) -> list[dict[str, Any]]:
    parse: dict[str, Any] = {"declared_lists": LISTS, **kw.pop("parse", {})}
    parsed = parse_rules(rules, key_field="id", group="g", **parse)
    return apply_rules(items, parsed, **kw).items


VARIANTS = [
    {"id": "1", "g": "A", "images": ("a.jpg", "2.5"), "price": "3"},
    {"id": "2", "g": "A", "images": (), "price": "1.25"},
    {"id": "3", "g": "A", "images": ("10", "c.jpg"), "price": ""},
    {"id": "4", "g": "B", "images": ("7",), "price": "x"},
]


def test_join_takes_every_element_of_the_members_lists_in_order() -> None:
    out = run([{"then": [{"aggregate": "all", "op": "join", "of": "images", "separator": "|"}]}], VARIANTS)
    assert [i["all"] for i in out] == ["a.jpg|2.5|10|c.jpg"] * 3 + ["7"]


@pytest.mark.parametrize(("op", "want"), [("min", ["2.5", "7"]), ("max", ["10.0", "7"]), ("sum", ["12.5", "7"])])
def test_min_max_sum_read_the_number_of_every_element(op: str, want: list[str]) -> None:
    out = run([{"then": [{"aggregate": "n", "op": op, "of": "images"}]}], VARIANTS)
    assert [out[0]["n"], out[3]["n"]] == want  # as many decimals as the most precise element


def test_first_and_last_keep_the_members_list_and_make_the_target_a_list() -> None:
    rules = [
        {
            "then": [
                {"aggregate": "head", "op": "first", "of": "images"},
                {"aggregate": "tail", "op": "last", "of": "images"},
            ]
        }
    ]
    parsed = parse_rules(rules, key_field="id", declared_lists=LISTS, group="g")
    assert parsed[0].lists.fields == {"images", "head", "tail"}
    out = apply_rules(VARIANTS, parsed).items
    assert [i["head"] for i in out] == [("a.jpg", "2.5")] * 3 + [("7",)]
    assert [i["tail"] for i in out] == [("10", "c.jpg")] * 3 + [("7",)]


def test_a_template_of_is_one_text_per_member_a_list_in_it_joined() -> None:
    out = run([{"then": [{"aggregate": "n", "op": "first", "of": "{images}"}]}], VARIANTS)
    assert (
        out[0]["n"] == "a.jpg,2.5"
        and "n"
        not in parse_rules(
            [{"then": [{"aggregate": "n", "op": "first", "of": "{images}"}]}],
            key_field="id",
            declared_lists=LISTS,
            group="g",
        )[0].lists
    )


def test_a_text_aggregate_written_into_a_list_field_is_a_text() -> None:
    out = run([{"then": [{"aggregate": "images", "op": "count"}]}], VARIANTS)
    assert [i["images"] for i in out] == ["3", "3", "3", "1"]  # a text (P2): json writes "3"


def test_a_list_group_field_groups_by_its_text() -> None:
    items = [{"id": str(n), "g": g, "images": ()} for n, g in enumerate([("a", "b"), ("a", "b"), ("a",), ()])]
    out = run(
        [{"then": [{"aggregate": "n", "op": "count"}]}], items, parse={"declared_lists": frozenset({"g", "images"})}
    )
    assert [i["n"] for i in out] == ["2", "2", "1", "1"]


ROWS = {"lk": [{"code": "b", "v": "from b"}, {"code": " c ", "v": "from c"}]}


def lookup(match: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"then": [{"lookup": "lk", "match": match, "set": {"out": "v"}, **extra}]}]


def test_a_list_match_tries_its_elements_in_order_and_the_first_with_a_row_matches() -> None:
    items = [
        {"id": "1", "images": ("a", " c", "b")},
        {"id": "2", "images": ("a",)},
        {"id": "3", "images": ()},
    ]
    parsed = parse_rules(lookup("images"), key_field="id", declared_lists=LISTS, lookups={"lk": "t"})
    outcome = apply_rules(items, parsed, lookups=ROWS, lookup_keys={"lk": "code"})
    assert [i.get("out", "") for i in outcome.items] == ["from c", "", ""]
    (report,) = outcome.lookups
    assert (report["matched"], report["unmatched"]) == (1, 2)
    assert report["unmatched_values"] == [{"value": "a", "count": 1}, {"value": "", "count": 1}]


def test_a_lookup_writing_a_list_field_writes_a_text_or_none() -> None:
    items = [{"id": "1", "k": "b", "images": ("x",)}, {"id": "2", "k": "z", "images": ("x",)}]
    rules = [{"then": [{"lookup": "lk", "match": "k", "set": {"images": "v"}, "default": {"images": ""}}]}]
    parsed = parse_rules(rules, key_field="id", declared_lists=LISTS, lookups={"lk": "t"})
    out = apply_rules(items, parsed, lookups=ROWS, lookup_keys={"lk": "code"}).items
    assert [i["images"] for i in out] == ["from b", ""]


def test_channel_rules_read_the_project_lists_and_may_make_their_own() -> None:
    doc = spec(
        rules=[{"then": [{"split": "tags", "separator": "|"}]}],
        exports=[
            {"name": "a", "format": "json", "path": "a.json", "rules": [{"then": [{"take": "images", "count": 1}]}]},
            {
                "name": "b",
                "format": "json",
                "path": "b.json",
                "rules": [{"then": [{"split": "title", "separator": " "}]}],
            },
            {"name": "c", "format": "json", "path": "c.json"},
        ],
    )
    parsed = parse_spec(doc)
    assert parsed.list_fields.fields == {"images", "tags"}
    a, b, c = parsed.exports
    assert a.parsed_rules[0].lists.fields == {"images", "tags"} and a.list_fields == parsed.list_fields
    assert b.list_fields.fields == {"images", "tags", "title"} and b.list_fields.declared == {"images"}
    assert c.list_fields == parsed.list_fields


def test_group_first_in_a_remove_condition_is_a_spec_error_about_the_element() -> None:
    doc = spec(rules=[{"then": [{"remove": "images", "when": {"group_first": True}}]}])
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    assert info.value.path == "rules[0].then[0].when" and "element" in str(info.value)


@pytest.mark.parametrize("elements", [(), ("a",), ('a"b', "c\\d", "x,y", "{}", "é"), ("NULL", " ")])
def test_a_staged_lists_elements_read_back_as_written(elements: tuple[str, ...]) -> None:
    from firefeed.pipeline.parse._lists import array_literal, literal_elements

    assert literal_elements(array_literal(elements)) == tuple(e.strip() for e in elements if e.strip())


@given(
    cell=st.text(alphabet=st.sampled_from(list('ab ,;|"\\\t\u00a0é{}')), max_size=30),
    separator=st.sampled_from([",", ";", "|", ", ", "ab"]),
)
def test_a_split_cell_is_the_array_literal_of_its_parts(cell: str, separator: str) -> None:
    """The fast path for cells with nothing to escape writes what array_literal writes."""
    from firefeed.pipeline.parse._lists import array_literal, split_cell

    assert split_cell(cell, separator) == array_literal(cell.split(separator) if cell else [])


#: list cells without white space (most real ones: the staging's fast path) and with it
_CLEAN = list('ab,;|"\\é{}')
list_cells = st.one_of(
    st.text(alphabet=st.sampled_from(_CLEAN), max_size=30),
    st.text(alphabet=st.sampled_from([*_CLEAN, " ", "\t", "\u00a0", "\u2003", "\x1c", "\x1f"]), max_size=30),
)


@given(cell=list_cells, separator=st.sampled_from([",", ";", "|", "\t", " "]))
def test_a_delimited_cell_splits_back_into_the_trimmed_non_empty_elements(cell: str, separator: str) -> None:
    """What a csv list with a one-character separator stages (text MERGE splits on the separator) holds
    exactly the elements the array literal would: trimmed of any white space, none empty."""
    from firefeed.pipeline.parse._lists import array_literal, delimited_cell, delimited_elements, literal_elements

    staged = delimited_cell(cell, separator)
    want = literal_elements(array_literal(cell.split(separator) if cell else []))
    assert delimited_elements(staged, separator) == want
    assert (staged == "") == (want == ())


@given(cells=st.lists(list_cells, max_size=12), separator=st.sampled_from([",", ";", "|", "\t", " "]))
@example(cells=[",a"], separator=",")  # an empty element only at the block's start,
@example(cells=["a", "", "b,"], separator=",")  # or only at its end,
@example(cells=["a,", "b"], separator=",")  # or where two cells meet
@example(cells=["", "a", ""], separator=",")
@example(cells=["a", "b\u00a0"], separator=",")  # white space only at a cell's end
def test_a_block_of_cells_is_staged_as_each_cell_on_its_own(cells: list[str], separator: str) -> None:
    """The parser stages a block's list cells with one check of them all (`delimit_block`): the result must be
    what each cell staged on its own gives, whichever cells are clean and whichever are not."""
    from firefeed.pipeline.parse._lists import delimit_block, delimited_cell

    block = [(n, ["x", cell]) for n, cell in enumerate(cells)]
    delimit_block(block, 1, separator)
    assert [values[1] for _, values in block] == [delimited_cell(cell, separator) for cell in cells]


def test_only_csv_lists_with_a_one_character_separator_are_staged_delimited() -> None:
    from firefeed.pipeline.parse._lists import delimited_lists

    lists = {"images": ",", "tags": " | ", "sizes": "\t"}
    assert delimited_lists("csv", lists) == {"images": ",", "sizes": "\t"}
    assert delimited_lists("tsv", lists) == {"images": ",", "sizes": "\t"}
    assert delimited_lists("json", lists) == delimited_lists("xml", lists) == delimited_lists("csv", None) == {}
