"""Review of the delta's MERGE (#52): cases the items-rows and second-connection changes must also
give a full run's files and report for."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import write_csv
from tests.integration.test_delta_by_items import STOCK, projects
from tests.integration.test_incremental import files, merge_detail, named, ok

pytestmark = pytest.mark.integration


def test_a_large_stock_found_unclean_beside_a_changed_source_with_a_repeated_key_is_merged(
    run_env: Path, tmp_path: Path
) -> None:
    """Two enrich sources change: promo, whose kept rows had a repeated key (its kept first rows are
    made while the candidates are found), and stock, large and clean before, counted on a second
    connection, which gained a repeated key: the candidates are found again, and so are promo's kept
    first rows (a second CREATE of them failed the run)."""
    n = 12_000
    write_csv(tmp_path / "main.csv", ["id", "title", "price", "brand"], [[str(i), "t", "1", "b0"] for i in range(n)])
    base = [[str(i), str(i % 5)] for i in range(n)]
    write_csv(tmp_path / "stock.csv", ["id", "stock"], base)
    write_csv(tmp_path / "promo.csv", ["id", "price"], [["1", "10"], ["2", "20"], ["1", "11"]])
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"]])
    promo = {"name": "promo", "url": "promo.csv", "mode": "enrich"}
    refreshed, full, fresh = projects(tmp_path, [STOCK, promo])
    ok(refreshed)
    ok(full)
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [["5", "9"], *base, ["5", "0"]])
    write_csv(tmp_path / "promo.csv", ["id", "price"], [["1", "10"], ["2", "21"], ["1", "11"]])
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "staged rows"
    assert delta["incremental"]["items_changed"] == 2, delta["incremental"]  # 2 (price), 5 (stock)
    assert named(delta, refreshed.stem) == named(ok(full, "--full"), full.stem)
    assert files(run_env, refreshed.stem) == files(run_env, full.stem)
    ok(fresh)
    assert files(run_env, refreshed.stem) == files(run_env, fresh.stem)
