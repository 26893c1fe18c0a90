"""The delta's MERGE makes the changed items' new rows from their items rows, without the primary's
staging, when that is what MERGE gives (#52): the changed enrich source is the last to contribute its
fields and no value another source also gives goes empty. Every other case merges the candidates
again from every source. Each way gives a full run's files and report, and says which it took."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import write_csv
from tests.integration.test_incremental import PER_ITEM_RULES, files, merge_detail, named, ok, write_project

pytestmark = pytest.mark.integration

RULES = [
    *PER_ITEM_RULES,
    {
        "name": "cheap",
        "when": {"field": "price", "op": "lt", "value": "10"},
        "then": [{"set": "label", "value": "cheap"}],
    },
]


def stock_rows(skip: tuple[int, ...] = ()) -> list[list[str]]:
    """Every item's stock, and a price for items 1-30 but every 4th (empty: the primary's stands)."""
    return [[str(i), str(i % 5), "" if i % 4 == 0 else str(100 + i)] for i in range(1, 31) if i not in skip]


def main_rows(repeated: bool) -> list[list[str]]:
    rows = [[str(i), f"item {i}", str(i), f"b{i % 3}"] for i in range(1, 31)]
    return rows + ([["7", "again 7", "1", "b0"]] if repeated else [])


def projects(tmp_path: Path, sources: list[dict[str, Any]], n: int = 3) -> list[Path]:
    specs = []
    for _ in range(n):
        path = write_project(tmp_path, f"dbi{uuid.uuid4().hex[:8]}", rules=RULES)
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["sources"] = [{"name": "main", "url": "main.csv"}, *sources]
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        specs.append(path)
    return specs


def same_as_full_and_fresh(run_env: Path, refreshed: Path, full: Path, fresh: Path, delta: dict[str, Any]) -> None:
    assert named(delta, refreshed.stem) == named(ok(full, "--full"), full.stem)
    assert files(run_env, refreshed.stem) == files(run_env, full.stem)
    ok(fresh)
    assert files(run_env, refreshed.stem) == files(run_env, fresh.stem)


STOCK = {"name": "stock", "url": "stock.csv", "mode": "enrich"}


def test_a_stock_change_shadowing_the_primarys_field_takes_the_items_rows(run_env: Path, tmp_path: Path) -> None:
    """Stock also gives the primary's price: values changed, a key gained (its empty price leaves the
    primary's), a key lost whose price was empty, an empty price filled, a repeated and an empty key."""
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], main_rows(repeated=True))
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], stock_rows(skip=(5, 6)))
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    refreshed, full, fresh = projects(tmp_path, [STOCK])
    ok(refreshed)
    ok(full)
    rows = [r for r in stock_rows(skip=(8,)) if r[0] not in ("1", "4", "13")]
    rows += [["1", "1", "5"], ["4", "2", "77"], ["5", "0", "50"], ["6", "3", ""], [" 13", "1", "3"], ["13", "0", "9"]]
    rows += [["", "1", "1"], ["99", "4", "1"]]
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], rows)
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "items rows"
    # 1 (price and stock), 4 (price), 5 and 6 (gained), 8 (lost: its stock), 13 (price)
    assert delta["incremental"]["items_changed"] == 6, delta["incremental"]
    same_as_full_and_fresh(run_env, refreshed, full, fresh, delta)


@pytest.mark.parametrize("how", ["emptied", "lost"])
def test_a_value_the_primary_also_gives_going_empty_merges_the_candidates_again(
    run_env: Path, tmp_path: Path, how: str
) -> None:
    """Item 2's stock price (102) goes empty, or its stock row goes: its price is the primary's again, which
    its items row no longer holds. The primary has a repeated key: its first rows are made then."""
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], main_rows(repeated=True))
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], stock_rows())
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    refreshed, full, fresh = projects(tmp_path, [STOCK])
    ok(refreshed)
    ok(full)
    rows = stock_rows(skip=(2,)) + ([["2", "2", ""]] if how == "emptied" else [])
    rows = [["3", "0", "103"] if r[0] == "3" else r for r in rows]
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], rows)
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "staged rows"
    assert delta["incremental"]["items_changed"] == 2, delta["incremental"]  # 2, 3 (its stock)
    same_as_full_and_fresh(run_env, refreshed, full, fresh, delta)


def test_a_change_a_later_source_may_override_merges_the_candidates_again(run_env: Path, tmp_path: Path) -> None:
    """promo, after stock, also gives a price: an item's price may be promo's whatever stock says."""
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], main_rows(repeated=False))
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], stock_rows())
    write_csv(tmp_path / "promo.csv", ["id", "price"], [["1", "1"], ["2", ""], ["3", "3"]])
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    promo = {"name": "promo", "url": "promo.csv", "mode": "enrich"}
    refreshed, full, fresh = projects(tmp_path, [STOCK, promo])
    ok(refreshed)
    ok(full)
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], [["1", "0", "7"], ["2", "0", "8"], *stock_rows()[2:]])
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "staged rows"
    assert delta["incremental"]["items_changed"] == 2, delta["incremental"]  # 1 (its stock; promo's price), 2
    same_as_full_and_fresh(run_env, refreshed, full, fresh, delta)


def test_two_changed_sources_merge_the_candidates_again(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], main_rows(repeated=False))
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [r[:2] for r in stock_rows()])
    write_csv(tmp_path / "promo.csv", ["id", "price"], [["1", "1"], ["2", "20"]])
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    promo = {"name": "promo", "url": "promo.csv", "mode": "enrich"}
    refreshed, full, fresh = projects(tmp_path, [STOCK, promo])
    ok(refreshed)
    ok(full)
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [["1", "0"], *[r[:2] for r in stock_rows()[1:]]])
    write_csv(tmp_path / "promo.csv", ["id", "price"], [["1", "1"], ["3", "30"]])
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "staged rows"
    assert delta["incremental"]["items_changed"] == 3, delta["incremental"]  # 1 (stock), 2 and 3 (price)
    same_as_full_and_fresh(run_env, refreshed, full, fresh, delta)


def test_a_source_that_no_longer_gives_a_field_the_primary_has_merges_the_candidates_again(
    run_env: Path, tmp_path: Path
) -> None:
    """stock's header loses price: the items' fields are the same (the primary has price), but what stock
    contributes is not what its kept rows did."""
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], main_rows(repeated=False))
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], stock_rows())
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    refreshed, full, fresh = projects(tmp_path, [STOCK])
    ok(refreshed)
    ok(full)
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [r[:2] for r in stock_rows()])
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "staged rows"
    assert delta["incremental"]["items_changed"] == 23, delta["incremental"]  # every stock price but the empty ones
    same_as_full_and_fresh(run_env, refreshed, full, fresh, delta)


def test_a_large_stock_counted_beside_the_candidates_is_found_again_when_it_gained_a_repeated_key(
    run_env: Path, tmp_path: Path
) -> None:
    """A stock source of more rows than one connection counts first (`side_work_first`) is counted on a
    second connection while the candidates are found as if still clean: a change of values, then one
    that adds a repeated and an empty key (its first rows made and the candidates found again)."""
    n = 12_000
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], [[str(i), "t", "1", "b0"] for i in range(n)])
    base = [[str(i), str(i % 5), "" if i % 4 == 0 else str(100 + i)] for i in range(n)]
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], base)
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    refreshed, full, fresh = projects(tmp_path, [STOCK])
    ok(refreshed)
    ok(full)
    changed = [[r[0], r[1], "7"] if int(r[0]) % 100 == 1 else r for r in base]
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], changed)
    delta = ok(refreshed)
    assert merge_detail(delta["run_id"])["changed_by"] == "items rows"
    assert delta["incremental"]["items_changed"] == n // 100, delta["incremental"]
    assert named(delta, refreshed.stem) == named(ok(full, "--full"), full.stem)
    assert files(run_env, refreshed.stem) == files(run_env, full.stem)

    # 5 and 6 get new first rows (prices 55 and 66); their later rows and the empty key change nothing.
    repeated = [["5", "0", "55"], ["6", "1", "66"], *changed, ["5", "4", "9"], [" 6", "4", "9"], ["", "1", "1"]]
    write_csv(tmp_path / "stock.csv", ["id", "stock", "price"], repeated)
    again = ok(refreshed)
    assert merge_detail(again["run_id"])["changed_by"] == "items rows"
    assert again["incremental"]["items_changed"] == 2, again["incremental"]
    assert again["sources"] == ok(full, "--full")["sources"]  # the repeated and empty keys counted
    assert files(run_env, refreshed.stem) == files(run_env, full.stem)
    ok(fresh)
    assert files(run_env, refreshed.stem) == files(run_env, fresh.stem)
