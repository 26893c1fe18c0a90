"""SPEC 8.19-8.25 end to end: the google-xml channel, regular expressions, default columns, spec errors.

8.22 and 8.23 (CSV blank lines, repeated names) are in test_parse_csv and
test_stage, where the readers are tested both in process and in a parser child.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from lxml import etree
from sqlalchemy import Engine

from firefeed.export.google_xml import GOOGLE_NS
from tests.integration.conftest import cli, read_csv, run_json, write_csv
from tests.integration.test_rules_differential import KEY_FIELD, run_both

pytestmark = pytest.mark.integration


def _spec(tmp: Path, project: str, rows: list[list[str]], exports: list[dict[str, Any]], **top: Any) -> Path:
    header, body = rows[0], rows[1:]
    write_csv(tmp / "main.csv", header, body)
    spec = {"company": "fine", "project": project, "sources": [{"name": "main", "url": "main.csv"}], **top}
    # C3: these items are not Google-complete; the tests read the <channel> and what google-xml writes.
    spec["exports"] = [{"max_invalid": "100%", **e} if e["format"] == "google-xml" else e for e in exports]
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _run(spec: Path) -> dict[str, Any]:
    code, report = run_json(spec)
    assert code == 0, report
    return report


def _channel(path: Path) -> tuple[etree._Element, bytes]:
    data = path.read_bytes()
    channel = etree.fromstring(data).find("channel")
    assert channel is not None
    return channel, data


ITEMS = [
    ["id", "title", "url"],
    ["1", "first", "https://shop.example/p/1?a=1&b=2"],
    ["2", "second", "https://shop.example/p/2?x=<y>&z"],
    ["3", "third", ""],
]


# -- 8.19: google-xml <channel> ---------------------------------------------------------------------


def test_the_channel_link_is_the_exports_channel_link_escaped(run_env: Path, tmp_path: Path) -> None:
    export = {
        "name": "g",
        "format": "google-xml",
        "path": "g.xml",
        "fields": {"id": "id", "title": "title", "link": "url"},
        "channel_link": "https://shop.example/?a=1&b=<2>\x01",
    }
    _run(_spec(tmp_path, "chan_set", ITEMS, [export], name="Shoes & <Boots>"))
    channel, data = _channel(run_env / "fine" / "chan_set" / "g.xml")
    assert [child.tag for child in channel][:3] == ["title", "link", "description"]
    assert channel.findtext("title") == "Shoes & <Boots>"
    assert channel.findtext("link") == "https://shop.example/?a=1&b=<2>"  # XML 1.0 cannot hold \x01 (8.25)
    assert b"<link>https://shop.example/?a=1&amp;b=&lt;2&gt;</link>" in data
    assert channel.findtext("description") == "Shoes & <Boots>"


@pytest.mark.parametrize("stored_in_order", [True, False])
def test_without_a_channel_link_the_link_is_the_first_exported_items_link(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored_in_order: bool
) -> None:
    if not stored_in_order:  # the groups are then read by `_ff_ord`: the first item is still the first
        import firefeed.export._copy as copy_module

        monkeypatch.setattr(copy_module, "in_physical_order", lambda *args: False)
    export = {
        "name": "g",
        "format": "google-xml",
        "path": "g.xml",
        "fields": {"id": "id", "link": "url"},
        "where": {"field": "id", "op": "ne", "value": "1"},
    }
    _run(_spec(tmp_path, "chan_first", ITEMS, [export]))
    channel, data = _channel(run_env / "fine" / "chan_first" / "g.xml")
    assert channel.findtext("title") == "chan_first"  # no `name`: the project's id
    assert channel.findtext("link") == "https://shop.example/p/2?x=<y>&z"
    assert b"<link>https://shop.example/p/2?x=&lt;y&gt;&amp;z</link>" in data
    assert [item.findtext(f"{{{GOOGLE_NS}}}id") for item in channel.findall("item")] == ["2", "3"]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"id": "id", "link": "url"}, {"field": "id", "op": "eq", "value": "3"}),  # its link is ""
        ({"id": "id", "title": "title"}, None),  # no link column
        ({"id": "id", "link": "url"}, {"field": "id", "op": "eq", "value": "none"}),  # no item at all
    ],
)
def test_with_no_first_link_the_channel_link_is_empty_and_the_feed_is_whole(
    run_env: Path, tmp_path: Path, fields: dict[str, str], where: dict[str, str] | None
) -> None:
    export = {"name": "g", "format": "google-xml", "path": "g.xml", "fields": fields, "max_drop": 100}
    if where is not None:
        export["where"] = where
    _run(_spec(tmp_path, "chan_none", ITEMS, [export]))
    channel, data = _channel(run_env / "fine" / "chan_none" / "g.xml")
    assert [child.tag for child in channel][:3] == ["title", "link", "description"]
    assert channel.findtext("link") == ""
    assert data.endswith(b"</channel>\n</rss>\n") and data.count(b"<channel>") == 1


def test_the_channel_description_is_the_exports_else_the_title(run_env: Path, tmp_path: Path) -> None:
    # P32: `channel_description` is a key of a google-xml export; unset, <description> repeats <title>.
    exports = [
        {"name": "set", "format": "google-xml", "path": "set.xml", "channel_description": "Our <best> & more\x05"},
        {"name": "unset", "format": "google-xml", "path": "unset.xml"},
    ]
    _run(_spec(tmp_path, "chan_desc", ITEMS, exports, name="Shop"))
    channel, data = _channel(run_env / "fine" / "chan_desc" / "set.xml")
    assert channel.findtext("description") == "Our <best> & more"
    assert b"<description>Our &lt;best&gt; &amp; more</description>" in data
    channel, _ = _channel(run_env / "fine" / "chan_desc" / "unset.xml")
    assert channel.findtext("description") == channel.findtext("title") == "Shop"


@pytest.mark.parametrize(
    ("fields", "link"),
    [
        # a sub-attribute named link is not the item's link, before or after the flat one
        ({"id": "id", "shipping.link": "title", "link": "url"}, "https://shop.example/p/1?a=1&b=2"),
        ({"id": "id", "shipping.link": "title"}, ""),
        # a parent `link` of sub-attributes has no value of its own
        ({"id": "id", "link.url": "url", "link.label": "title"}, ""),
    ],
)
def test_the_channel_link_is_only_the_flat_link_column(
    run_env: Path, tmp_path: Path, fields: dict[str, str], link: str
) -> None:
    export = {"name": "g", "format": "google-xml", "path": "g.xml", "fields": fields}
    _run(_spec(tmp_path, "chan_nested", ITEMS, [export]))
    channel, _ = _channel(run_env / "fine" / "chan_nested" / "g.xml")
    element = channel.find("link")
    assert element is not None and len(element) == 0  # a text, never sub-elements taken along
    assert channel.findtext("link") == link
    assert len(channel.findall("item")) == 3


def test_a_list_link_gives_the_channel_its_joined_value(run_env: Path, tmp_path: Path) -> None:
    # P32 with P26: the link's value is the text of the list, its elements joined with ","
    rows = [["id", "url"], ["1", "https://a.example/1|https://b.example/1"], ["2", "https://a.example/2"]]
    header, body = rows[0], rows[1:]
    write_csv(tmp_path / "main.csv", header, body)
    spec = {
        "company": "fine",
        "project": "chan_list",
        "sources": [{"name": "main", "url": "main.csv", "lists": {"url": "|"}}],
        "exports": [
            {
                "name": "g",
                "format": "google-xml",
                "path": "g.xml",
                "fields": {"id": "id", "link": "url"},
                "max_invalid": "100%",
            }
        ],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    _run(path)
    channel, _ = _channel(run_env / "fine" / "chan_list" / "g.xml")
    assert channel.findtext("link") == "https://a.example/1,https://b.example/1"
    assert [e.text for e in channel.find("item").iter(f"{{{GOOGLE_NS}}}link")] == [
        "https://a.example/1",
        "https://b.example/1",
    ]


def test_a_parent_whose_sub_values_are_all_removed_characters_is_left_out(run_env: Path, tmp_path: Path) -> None:
    # 8.25 with P25: the emptied sub-elements go, then the parent they leave empty
    rows = [["id", "s", "t"], ["1", "\x04", "\x02"], ["2", "\x04", "ok"]]
    export = {"name": "g", "format": "google-xml", "path": "g.xml", "fields": {"id": "id", "sh.a": "s", "sh.b": "t"}}
    _run(_spec(tmp_path, "xml_parent", rows, [export]))
    channel, data = _channel(run_env / "fine" / "xml_parent" / "g.xml")
    g = f"{{{GOOGLE_NS}}}"
    first, second = channel.findall("item")
    assert [etree.QName(e).localname for e in first] == ["id"]
    assert [(etree.QName(e).localname, e.text) for e in second.find(f"{g}sh")] == [("b", "ok")]
    assert b"<g:sh></g:sh>" not in data


def test_google_xml_leaves_out_characters_xml_cannot_hold(run_env: Path, tmp_path: Path) -> None:
    # SPEC 8.25: C0 controls other than tab, LF and CR, U+FFFE and U+FFFF; an element left empty goes.
    rows = [["id", "title", "brand"], ["1", "a\x01b\x0bc\x1fd\ufffee\uffff\tf", "\x02\x7f"], ["2", "plain", "\x03"]]
    export = {"name": "g", "format": "google-xml", "path": "g.xml"}
    _run(_spec(tmp_path, "xml_chars", rows, [export], name="T\x04itle"))
    channel, _ = _channel(run_env / "fine" / "xml_chars" / "g.xml")
    assert channel.findtext("title") == "Title"
    items = [[(etree.QName(e).localname, e.text) for e in item] for item in channel.findall("item")]
    assert items == [
        [("id", "1"), ("title", "abcde\tf"), ("brand", "\x7f")],
        [("id", "2"), ("title", "plain")],
    ]


# -- 8.20: regular expressions (the SQL route, as production runs them) ---------------------------------


def test_anchors_hold_only_at_the_ends_of_the_whole_value_and_dot_matches_a_newline(engine: Engine) -> None:
    values = ["a\nb", "a\n", "b\na", "a"]
    items = [{KEY_FIELD: str(i), "t": v} for i, v in enumerate(values)]
    rules = [
        {
            "name": "start",
            "when": {"field": "t", "op": "matches", "value": "^b"},
            "then": [{"set": "start", "value": "y"}],
        },
        {"name": "end", "when": {"field": "t", "op": "matches", "value": "a$"}, "then": [{"set": "end", "value": "y"}]},
        {
            "name": "dot",
            "when": {"field": "t", "op": "matches", "value": "a.b"},
            "then": [{"set": "dot", "value": "y"}],
        },
        {
            "name": "replace",
            "then": [
                {"set": "r1", "value": "{t}"},
                {"regex_replace": "r1", "pattern": "^", "with": "<"},
                {"regex_replace": "r1", "pattern": "$", "with": ">"},
                {"set": "r2", "value": "{t}"},
                {"regex_replace": "r2", "pattern": ".", "with": "_"},
            ],
        },
    ]
    result, got, want = run_both(engine, items, [KEY_FIELD, "t"], rules)
    assert [(i["start"], i["end"], i["dot"], i["r1"], i["r2"]) for i in got] == [
        ("", "", "y", "<a\nb>", "___"),
        ("", "", "", "<a\n>", "__"),  # Python's default `$` would match before the final newline
        ("y", "y", "", "<b\na>", "___"),
        ("", "y", "", "<a>", "_"),
    ]
    assert result.matched == want.matched == {"start": 1, "end": 2, "dot": 1, "replace": 4}
    assert got == [{f: item.get(f, "") for f in result.fields} for item in want.items]


# -- 8.21: fields created by rules, for default export columns ---------------------------------------


RULES_21: list[dict[str, Any]] = [
    {
        "name": "never true",
        "when": {"field": "title", "op": "eq", "value": "no such title"},
        "then": [{"set": "made_b", "value": "b"}, {"set": "made_a", "value": "a"}],
    },
    {"name": "off", "enabled": False, "then": [{"set": "disabled_target", "value": "x"}]},
    {
        "name": "drop",
        "when": {"field": "title", "op": "eq", "value": "second"},
        "then": [{"set": "gone_with_excluded", "value": "x"}, {"exclude": True}],
        "else": [{"set": "made_else", "value": "e"}],
    },
    {"name": "last", "then": [{"set": "title", "value": "{title}!"}, {"copy": "made_c", "from": "id"}]},
]


@pytest.mark.parametrize(
    "rows",
    [ITEMS, [ITEMS[0], ["9", "no such title", "u"], ["8", "second", "v"]]],
    ids=["branches not reached", "branches reached"],
)
def test_default_columns_list_rule_targets_in_rule_and_action_order_whatever_the_data(
    run_env: Path, tmp_path: Path, rows: list[list[str]]
) -> None:
    exports = [
        {"name": "c", "format": "csv", "path": "c.csv", "max_drop": 100},
        {"name": "j", "format": "json", "path": "j.json", "max_drop": 100},
    ]
    _run(_spec(tmp_path, "default_cols", rows, exports, rules=RULES_21))
    header, body = read_csv(run_env / "fine" / "default_cols" / "c.csv")
    # Not the disabled rule's target, not the target in the branch that ends in `exclude`.
    assert header == ["id", "title", "url", "made_b", "made_a", "made_else", "made_c"]
    objects = json.loads((run_env / "fine" / "default_cols" / "j.json").read_text(encoding="utf-8"))
    assert [list(o) for o in objects] == [header] * len(body)
    if rows is ITEMS:
        assert body == [
            ["1", "first!", "https://shop.example/p/1?a=1&b=2", "", "", "e", "1"],
            ["3", "third!", "", "", "", "e", "3"],
        ]
    else:
        assert body == [["9", "no such title!", "u", "b", "a", "e", "9"]]


# -- 8.24: `\N` beyond the pattern's groups ------------------------------------------------------------


def test_a_group_reference_beyond_the_patterns_groups_is_a_spec_error(run_env: Path, tmp_path: Path) -> None:
    rules = [{"then": [{"regex_replace": "title", "pattern": "(fi)(rst)", "with": "\\2\\1\\3"}]}]
    spec = _spec(tmp_path, "bad_group", ITEMS, [{"name": "c", "format": "csv", "path": "c.csv"}], rules=rules)
    code, out = cli("run", str(spec), "--json")
    assert code == 2
    assert "rules[0].then[0].with" in out and "group 3" in out
    assert not (run_env / "fine" / "bad_group" / "c.csv").exists()
    # Within the groups (and `\\`) it is fine.
    rules[0]["then"][0]["with"] = "\\2\\1\\\\"
    _spec(tmp_path, "bad_group", ITEMS, [{"name": "c", "format": "csv", "path": "c.csv"}], rules=rules)
    _run(spec)
    assert read_csv(run_env / "fine" / "bad_group" / "c.csv")[1][0][1] == "rstfi\\"
