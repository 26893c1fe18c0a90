"""SPEC 9, channel rules (P29-P31): an export's own rules run after the project's, on its copy only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import filler, read_csv, run_json, write_csv

pytestmark = pytest.mark.integration

JEWELRY = Path(__file__).resolve().parents[1] / "fixtures" / "realfeeds" / "shopify-jewelry" / "jewelery.csv"


def _write(tmp: Path, spec: dict[str, Any]) -> Path:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _run(tmp: Path, spec: dict[str, Any]) -> dict[str, Any]:
    code, report = run_json(_write(tmp, spec))
    assert code == 0, report
    return report


def _pass_views(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The numbers of the pass views the runs make from now on, in order."""
    from firefeed.dataplane.views import RunViews

    views: list[int] = []
    make_view = RunViews.pass_view

    def spy(self: RunViews, company: str, run_id: str, number: int, *args: Any) -> str:
        views.append(number)
        return make_view(self, company, run_id, number, *args)

    monkeypatch.setattr(RunViews, "pass_view", spy)
    return views


def _items(tmp: Path) -> None:
    write_csv(
        tmp / "main.csv",
        ["id", "title", "cat", "price"],
        [
            ["1", "Ring", "Rings", "10"],
            ["2", "Test hat", "Hats", "5"],
            ["3", "Mug", "Mugs", "7"],
            ["4", "Bag", "", "9"],
        ],
    )
    write_csv(tmp / "cats.csv", ["code", "gpc"], [["Rings", "Jewelry > Rings"], ["Mugs", "Kitchen > Mugs"]])


def test_an_exports_rules_change_only_that_export_and_count_apart(run_env: Path, tmp_path: Path) -> None:
    _items(tmp_path)
    spec = {
        "company": "catalog",
        "project": "channel_rules",
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "url": "cats.csv", "key": "code"}],
        "rules": [
            {"name": "label", "then": [{"set": "label", "value": "shop"}]},
            {
                "name": "cheap",
                "when": {"field": "price", "op": "lt", "value": "6"},
                "then": [{"set": "cheap", "value": "y"}],
            },
        ],
        "exports": [
            {
                "name": "google",
                "format": "csv",
                "path": "google.csv",
                "rules": [
                    # the same name as a project rule: names are per export (P29)
                    {"name": "label", "then": [{"set": "label", "value": "google"}]},
                    {"when": {"field": "title", "op": "starts_with", "value": "test"}, "then": [{"exclude": True}]},
                    {"then": [{"lookup": "cats", "match": "cat", "set": {"google_product_category": "gpc"}}]},
                    {"name": "price", "then": [{"append": "price", "value": " EUR"}]},
                ],
            },
            {"name": "plain", "format": "csv", "path": "plain.csv"},
        ],
    }
    report = _run(tmp_path, spec)
    out = run_env / "catalog" / "channel_rules"
    header, body = read_csv(out / "google.csv")
    # P30: the project rules' created fields, then the export's own
    assert header == ["id", "title", "cat", "price", "label", "cheap", "google_product_category"]
    assert body == [
        ["1", "Ring", "Rings", "10 EUR", "google", "", "Jewelry > Rings"],
        ["3", "Mug", "Mugs", "7 EUR", "google", "", "Kitchen > Mugs"],
        ["4", "Bag", "", "9 EUR", "google", "", ""],
    ]
    header, body = read_csv(out / "plain.csv")
    assert header == ["id", "title", "cat", "price", "label", "cheap"]
    assert [r[3:] for r in body] == [["10", "shop", ""], ["5", "shop", "y"], ["7", "shop", ""], ["9", "shop", ""]]

    # rules.* counts the project's rules only; the export's own are under its entry
    assert report["rules"]["matched"] == {"label": 4, "cheap": 1}
    assert report["rules"]["excluded"] == 0
    google, plain = report["exports"]
    assert google["rows"] == 3 and plain["rows"] == 4
    assert google["rules"]["matched"] == {"label": 4, "rule 2": 1, "rule 3": 3, "price": 3}
    assert google["rules"]["excluded"] == 1
    (lookup,) = google["rules"]["lookups"]
    assert (lookup["rule"], lookup["matched"], lookup["unmatched"]) == ("rule 3", 2, 1)
    assert lookup["unmatched_values"] == [{"value": "", "count": 1}]
    assert "rules" not in plain


def test_the_cli_table_shows_an_exports_own_rules_and_lookups(run_env: Path, tmp_path: Path) -> None:
    from tests.integration.conftest import cli

    _items(tmp_path)
    spec = {
        "company": "catalog",
        "project": "channel_cli",
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "url": "cats.csv", "key": "code"}],
        "exports": [
            {
                "name": "google",
                "format": "csv",
                "path": "google.csv",
                "rules": [{"name": "gpc", "then": [{"lookup": "cats", "match": "cat", "set": {"gpc": "gpc"}}]}],
            }
        ],
    }
    code, out = cli("run", str(_write(tmp_path, spec)))
    assert code == 0, out
    assert "google rules: 1 pass(es), 0 excluded" in out
    assert "lookup cats in 'gpc' then[0]: 2 matched, 2 unmatched" in out


def test_channel_rules_keep_one_shopify_item_per_group_for_one_export(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(JEWELRY, tmp_path / "jewelery.csv")
    spec = {
        "company": "catalog",
        "project": "channel_groups",
        "group": "item_group_id",
        "sources": [{"name": "shopify", "url": "jewelery.csv", "key_from": "{Handle}-{Option1 Value}"}],
        "rules": [
            {"name": "image rows", "when": {"field": "Option1 Value", "op": "empty"}, "then": [{"exclude": True}]},
            {"name": "group", "then": [{"copy": "item_group_id", "from": "Handle"}]},
        ],
        "exports": [
            {"name": "variants", "format": "csv", "path": "variants.csv", "fields": {"id": "id"}},
            {
                "name": "products",
                "format": "csv",
                "path": "products.csv",
                "fields": {"id": "item_group_id", "variants": "variants"},
                "rules": [
                    {"name": "count", "then": [{"aggregate": "variants", "op": "count"}]},
                    {"name": "one per product", "when": {"not": {"group_first": True}}, "then": [{"exclude": True}]},
                ],
            },
        ],
    }
    report = _run(tmp_path, spec)
    out = run_env / "catalog" / "channel_groups"
    variants = [r[0] for r in read_csv(out / "variants.csv")[1]]
    products = read_csv(out / "products.csv")[1]
    handles = list(dict.fromkeys(v.rsplit("-", 1)[0] for v in variants))
    assert [p[0] for p in products] == handles
    assert ["leather-anchor", "2"] in products and ["chain-bracelet", "2"] in products
    assert sum(int(p[1]) for p in products) == len(variants)
    assert report["exports"][1]["rules"]["excluded"] == len(variants) - len(handles)


def test_a_repeated_rule_name_within_an_export_is_a_spec_error_naming_it(run_env: Path, tmp_path: Path) -> None:
    _items(tmp_path)
    rules = [{"name": "a", "then": [{"set": "x", "value": "1"}]}, {"name": "a", "then": [{"set": "y", "value": "1"}]}]
    spec = {
        "company": "catalog",
        "project": "channel_dup",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "e", "format": "csv", "path": "e.csv", "rules": rules}],
    }
    code, out = run_json_error(_write(tmp_path, spec))
    assert code == 2
    assert "exports[0].rules[1].name" in out


def run_json_error(spec: Path) -> tuple[int, str]:
    import contextlib
    import io

    from firefeed.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", str(spec)])
    return code, err.getvalue()


def test_the_drop_guard_skips_an_export_whose_rules_where_or_fields_changed_and_warns(
    run_env: Path, tmp_path: Path
) -> None:
    _items(tmp_path)
    spec: dict[str, Any] = {
        "company": "catalog",
        "project": "channel_guard",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [
            {"name": "google", "format": "csv", "path": "google.csv", "rules": []},
            {"name": "plain", "format": "csv", "path": "plain.csv"},
        ],
    }
    assert _run(tmp_path, spec)["status"] == "SUCCEEDED"
    # the export's own rules now drop 3 of its 4 items (75% > max_drop 50%): asked for, not guarded
    spec["exports"][0]["rules"] = [{"when": {"field": "id", "op": "ne", "value": "1"}, "then": [{"exclude": True}]}]
    report = _run(tmp_path, spec)
    google = report["exports"][0]
    assert google["rows"] == 1 and google["diff"]["drop"]["status"] == "unguarded"
    assert any("export 'google': 3 of 4 items dropped" in w and "not guarded" in w for w in report["warnings"])
    # the same spec again, and the feed loses items: guarded as before, for both exports
    write_csv(tmp_path / "main.csv", ["id", "title", "cat", "price"], [["1", "Ring", "Rings", "10"]])
    spec["exports"][1]["where"] = {"field": "id", "op": "ne", "value": "x"}  # plain's where changed: unguarded
    code, report = run_json(_write(tmp_path, spec))
    assert code == 0, report
    assert report["exports"][1]["diff"]["drop"]["status"] == "unguarded"
    write_csv(tmp_path / "main.csv", ["id", "title", "cat", "price"], [["9", "Other", "", "1"]])
    code, report = run_json(_write(tmp_path, spec))
    assert code == 1
    assert report["error"]["type"] == "DropGuardError"
    assert report["exports"][1]["diff"]["drop"]["status"] == "blocked"


def test_the_preview_shows_each_exports_own_rules_after_the_projects(run_env: Path, tmp_path: Path) -> None:
    import json

    from tests.integration.conftest import cli

    _items(tmp_path)
    spec = {
        "company": "catalog",
        "project": "channel_preview",
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [
            {
                "name": "no tests",
                "when": {"field": "title", "op": "starts_with", "value": "test"},
                "then": [{"exclude": True}],
            }
        ],
        "exports": [
            {"name": "plain", "format": "csv", "path": "plain.csv"},
            {
                "name": "google",
                "format": "csv",
                "path": "google.csv",
                "rules": [
                    {"name": "eur", "then": [{"append": "price", "value": " EUR"}]},
                    {
                        "name": "no bags",
                        "when": {"field": "title", "op": "eq", "value": "bag"},
                        "then": [{"exclude": True}],
                    },
                ],
            },
        ],
    }
    code, out = cli("preview", str(_write(tmp_path, spec)), "--json")
    assert code == 0, out
    preview = json.loads(out)
    (google,) = preview["exports"]
    assert google["name"] == "google"
    assert [(r["rule"], r["items_in"], r["changed"], r["excluded"]) for r in google["rules"]] == [
        ("eur", 3, 3, 0),
        ("no bags", 3, 0, 1),
    ]
    assert [i["key"] for i in google["items"]] == ["1", "3", "4"]  # the project's rule dropped 2
    assert google["items"][2]["excluded_by"] == "no bags"
    assert preview["rules"][0]["excluded"] == 1
    code, text = cli("preview", str(_write(tmp_path, spec)))
    assert code == 0 and "export 'google': its own rules" in text and "'9' -> '9 EUR'" in text


def test_a_lone_exports_rules_run_in_halves_with_the_same_bytes(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec with one export runs its own rules in the project's two halves (the other core would idle),
    into a view of its own beside the project's, never writing the project's tables; the export is byte
    for byte the one a run in one piece writes."""
    import firefeed.pipeline.rule_passes as rule_passes
    from firefeed.dataplane.views import RunViews

    _items(tmp_path)
    # Items of ~1.8 KB: more than one heap page, which the halves cut.
    rows = [
        ["1", "Ring", "Rings", "10"],
        ["2", "Test hat", "Hats", "5"],
        ["3", "Mug", "Mugs", "7"],
        ["4", "Bag", "", "9"],
        ["5", "Cup", "Mugs", "3"],
    ]
    body = [[*r, filler(i)] for i, r in enumerate(rows)]
    write_csv(tmp_path / "main.csv", ["id", "title", "cat", "price", "notes"], body)
    rules = [
        {"name": "label", "then": [{"set": "label", "value": "google"}]},
        # only excludes: in the export's own halves a DELETE, never in the project's
        {"when": {"field": "title", "op": "starts_with", "value": "test"}, "then": [{"exclude": True}]},
        {"then": [{"lookup": "cats", "match": "cat", "set": {"google_product_category": "gpc"}}]},
    ]

    def spec(project: str) -> dict[str, Any]:
        return {
            "company": "catalog",
            "project": project,
            "sources": [{"name": "main", "url": "main.csv"}],
            "lookups": [{"name": "cats", "url": "cats.csv", "key": "code"}],
            "rules": [{"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "2"}]}],
            # C3: these items are not Google-complete; this test reads the export's rules and bytes.
            "exports": [
                {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%", "rules": rules}
            ],
        }

    whole = _run(tmp_path, spec("lone_whole"))
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 1)
    views: list[int] = []
    make_view = RunViews.parts_view

    def spy(self: RunViews, company: str, run_id: str, number: int, tables: Any) -> str:
        views.append(number)
        return make_view(self, company, run_id, number, tables)

    monkeypatch.setattr(RunViews, "parts_view", spy)
    halves = _run(tmp_path, spec("lone_halves"))
    assert len(views) == 2 and views[0] == 0 and views[1] != 0, views  # the project's, then the export's
    assert halves["exports"][0]["rules"] == whole["exports"][0]["rules"]
    assert whole["exports"][0]["rules"]["excluded"] == 1
    assert whole["exports"][0]["rules"]["lookups"][0]["matched"] == 3
    one = (run_env / "catalog" / "lone_whole" / "google.xml").read_bytes()
    two = (run_env / "catalog" / "lone_halves" / "google.xml").read_bytes()
    assert two.replace(b"lone_halves", b"lone_whole") == one


def test_a_lone_exports_rules_compute_the_projects_last_pass_as_they_copy_it(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the lone export's own rules are all that reads the project's result, the project's last pass,
    when it counts nothing (here a group aggregate over both halves), is a view per half, which the
    export's first pass computes as it copies it: the files and every count are those of the same run
    with the pass written as tables."""
    import firefeed.pipeline.rule_passes as rule_passes
    from firefeed.pipeline import steps

    cats = ["Rings", "Hats", "Rings", "Mugs", "", "Mugs", "Rings", "Hats"]
    body = [
        [str(i), f"{'Test ' if i == 3 else ''}Item {i}", cat, str(10 + i * 3), filler(i)] for i, cat in enumerate(cats)
    ]
    write_csv(tmp_path / "main.csv", ["id", "title", "cat", "price", "notes"], body)
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 1)

    def spec(project: str) -> dict[str, Any]:
        return {
            "company": "catalog",
            "project": project,
            "group": "cat",
            "sources": [{"name": "main", "url": "main.csv"}],
            "rules": [
                {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "2"}]},
                {
                    "name": "no tests",
                    "when": {"field": "title", "op": "starts_with", "value": "test"},
                    "then": [{"exclude": True}],
                },
                {"name": "low", "then": [{"aggregate": "low", "op": "min", "of": "price"}]},
            ],
            "exports": [
                {
                    "name": "shop",
                    "format": "csv",
                    "path": "shop.csv",
                    "rules": [
                        {"name": "firsts", "when": {"not": {"group_first": "true"}}, "then": [{"exclude": True}]},
                        {"name": "mark", "then": [{"set": "mark", "value": "{low}"}]},
                    ],
                }
            ],
        }

    with monkeypatch.context() as m:
        m.setattr(steps, "read_once", lambda _spec: False)
        tables = _run(tmp_path, spec("last_as_tables"))
    views = _pass_views(monkeypatch)
    viewed = _run(tmp_path, spec("last_as_views"))
    assert views == [301, 302], views  # pass 3 (after the DELETE of pass 2), one view per half
    assert viewed["rules"] == tables["rules"] and viewed["rules"]["excluded"] == 1
    assert viewed["exports"][0]["rules"] == tables["exports"][0]["rules"]
    one = (run_env / "catalog" / "last_as_tables" / "shop.csv").read_bytes()
    two = (run_env / "catalog" / "last_as_views" / "shop.csv").read_bytes()
    assert one == two
    header, rows = read_csv(run_env / "catalog" / "last_as_views" / "shop.csv")
    # One item per group (the blank one is a group of its own), each with its group's lowest doubled price.
    got = [(r[header.index("id")], r[header.index("mark")]) for r in rows]
    assert got == [("0", "20.00"), ("1", "26.00"), ("4", "44.00"), ("5", "50.00")], got


def test_a_lone_pass_of_an_exports_rules_that_counts_nothing_is_a_view_its_readers_compute(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export's rules whose one pass counts nothing (every rule matches every item, none excludes) are a
    view over the project's result when that holds rows (here two halves' tables), computed as the file and
    its diagnostics read it: the file, the counts and the diagnostics are those of the same rules written as
    a table (a `when` every item meets makes the pass count, so it is a table). Over a result that is itself
    a view of a pass (the project's last pass counting nothing), it is a view when the file would read that in
    order (its groups hashed in one batch), else a table; for google-xml (whose writer reads heap pages) it
    stays a table."""
    import firefeed.export._copy as export_copy
    import firefeed.pipeline.rule_passes as rule_passes
    from firefeed.db import plans

    cats = ["Rings", "Hats", "Rings", "Mugs", "", "Mugs", "Rings", "Hats"]
    body = [
        [str(i), f"{'Test ' if i == 3 else ''}Item {i}", cat, str(10 + i * 3), f"a{i},b{i},c{i},d{i}", filler(i)]
        for i, cat in enumerate(cats)
    ]
    write_csv(tmp_path / "main.csv", ["id", "title", "cat", "price", "images", "notes"], body)
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 1)
    no_tests = {
        "name": "no tests",
        "when": {"field": "title", "op": "starts_with", "value": "test"},
        "then": [{"exclude": True}],
    }

    def spec(project: str, *, when: dict[str, Any] | None = None, fmt: str = "json", last: bool = True) -> dict:
        own: list[dict[str, Any]] = [
            {"name": "three", "then": [{"take": "images", "count": "3"}]},
            {"name": "mark", "then": [{"set": "mark", "value": "{cat}: {low} {images[0]}"}]},
        ]
        if when is not None:
            own = [{**r, "when": when} for r in own]
        rules = [
            {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "2"}]},
            {"name": "low", "then": [{"aggregate": "low", "op": "min", "of": "price"}]},
        ]
        return {
            "company": "catalog",
            "project": project,
            "group": "cat",
            "sources": [{"name": "main", "url": "main.csv", "lists": {"images": ","}}],
            # Ending with an exclusion, the project's result is its halves' tables; else its last pass's view.
            "rules": [*rules, no_tests] if last else rules,
            # C3: as google-xml these items are not Google-complete; the test reads which passes are views.
            "exports": [
                {
                    "name": "shop",
                    "format": fmt,
                    "path": f"shop.{fmt}",
                    "rules": own,
                    **({"max_invalid": "100%"} if fmt == "google-xml" else {}),
                }
            ],
        }

    views = _pass_views(monkeypatch)
    tables = _run(tmp_path, spec("channel_as_table", when={"field": "id", "op": "not_empty"}))
    assert views == [], views
    viewed = _run(tmp_path, spec("channel_as_view"))
    assert views == [10_000_001], views  # the export's one pass, one view over the project's two halves
    assert viewed["exports"][0]["rules"] == tables["exports"][0]["rules"]
    assert viewed["exports"][0]["rules"]["matched"] == {"three": 7, "mark": 7}
    for key in ("rows", "sha256", "diagnostics"):
        assert viewed["exports"][0].get(key) == tables["exports"][0].get(key), key
    one = (run_env / "catalog" / "channel_as_table" / "shop.json").read_bytes()
    two = (run_env / "catalog" / "channel_as_view" / "shop.json").read_bytes()
    assert two == one
    items = json.loads(one)
    assert [(i["id"], i["images"], i["mark"]) for i in items[:2]] == [
        ("0", ["a0", "b0", "c0"], "Rings: 20.00 a0"),
        ("1", ["a1", "b1", "c1"], "Hats: 26.00 a1"),
    ], items[:2]
    assert "3" not in [i["id"] for i in items]

    # Over the project's last pass viewed (a group aggregate, both halves joining one groups table), the
    # export's pass is a view too when the file's COPY reads the groups hashed, in order.
    views.clear()
    checked: list[list[tuple[str, str]]] = []
    heaps_in_order = export_copy.heaps_in_order

    def check(cur: Any, tables: Any) -> bool:
        checked.append(list(tables))
        return heaps_in_order(cur, tables)

    with monkeypatch.context() as m:
        m.setattr(export_copy, "heaps_in_order", check)
        over = _run(tmp_path, spec("channel_over_a_view", last=False))
    assert over["exports"][0]["rules"]["matched"]["mark"] == 8
    assert views == [201, 202, 10_000_001], views
    # The order check read the two pass tables under the views 201 and 202 (the COPY's driving scans), in order.
    ((first, second),) = checked
    assert first[1].endswith("_101") and second[1].endswith("_102") and first[0] == second[0] == "company_catalog"
    views.clear()
    with monkeypatch.context() as m:
        m.setattr(plans, "GROUPS_HASH_MAX_BYTES", 0)  # no hash of the groups in one batch: written as tables
        copied = _run(tmp_path, spec("channel_over_a_copy", last=False))
    assert views == [201, 202], views  # the project's last pass only (read once, by the export's copy)
    views.clear()
    with monkeypatch.context() as m:
        # The view is made (the check before the pass), then the COPY's own plan would reorder: read sorted.
        m.setattr(export_copy, "ordered_scans", lambda *_args, **_kw: None)
        _run(tmp_path, spec("channel_over_a_view_sorted", last=False))
    assert views == [201, 202, 10_000_001], views
    files = [
        (run_env / "catalog" / p / "shop.json").read_bytes()
        for p in ("channel_over_a_view", "channel_over_a_copy", "channel_over_a_view_sorted")
    ]
    assert files[0] == files[1] == files[2]
    assert [i["id"] for i in json.loads(files[0])] == [str(i) for i in range(8)]
    for key in ("rows", "sha256", "diagnostics", "rules"):
        assert over["exports"][0].get(key) == copied["exports"][0].get(key), key
    views.clear()
    _run(tmp_path, spec("channel_for_xml", fmt="google-xml"))
    assert views == [], views
