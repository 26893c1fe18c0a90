"""The delta's RULES with its pieces at once (pipeline/delta_rules.py, #52): whole refreshes run through it
(`delta.rules_delta` replaced by it) give a full run's files, report and `values`, viewed, in parts and
spliced; the new rows' last pass table becomes `RULED` by a rename, or by a copy when its columns are in
another order than the kept result's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml

from firefeed.dataplane.names import rules_tmp_table
from firefeed.pipeline import delta, delta_rules, rule_passes
from firefeed.schema.identifiers import ORD, company_schema
from tests.integration.test_delta_result import GOOGLE_XML, kept_keys, same_values, titled
from tests.integration.test_incremental import ok
from tests.integration.test_incremental_export import EXPORTS, first_delta, same_as_full, sources, three, written

pytestmark = pytest.mark.integration


@pytest.fixture
def from_kept(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Per delta whose old rows were counted from the kept result: (the old rows it held, the changed items)."""
    seen: list[tuple[int, int]] = []
    real = delta_rules._old_from_kept

    def spy(ctx: Any, tables: Any, *args: Any) -> delta_rules.OldCounts:
        counts = real(ctx, tables, *args)
        seen.append((counts.rows_out, tables.changed))
        return counts

    monkeypatch.setattr(delta_rules, "_old_from_kept", spy)
    return seen


@pytest.fixture
def renamed(monkeypatch: pytest.MonkeyPatch, database_url: str) -> list[bool]:
    """Refreshes run through `delta_rules.rules_delta`; per delta, whether its `RULED` was the renamed pass table."""
    seen: list[bool] = []
    real = delta_rules._as_ruled

    def spy(ctx: Any, tables: Any, new_r: Any, columns: Any) -> tuple[str, int]:
        table, n = real(ctx, tables, new_r, columns)
        with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (f'"{company_schema(ctx.spec.company)}"."{new_r.table}"',))
            seen.append(cur.fetchone()[0] is None)  # the pass table is gone: renamed
        return table, n

    monkeypatch.setattr(delta_rules, "_as_ruled", spy)
    return seen


def test_a_viewed_delta_through_it_gives_a_full_runs_files_report_and_values(
    run_env: Path, tmp_path: Path, database_url: str, renamed: list[bool], from_kept: list[tuple[int, int]]
) -> None:
    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 7: "preorder", 9: "gone"})  # 9 now excluded by the rule `low`
    first = ok(specs[0])
    assert first["incremental"]["mode"] == "delta", first["incremental"]
    assert from_kept == [(3, 3)]  # the kept result held the three items' old rows: none ruled
    same_as_full(run_env, first, specs)
    same_values(specs)

    # A delta on that delta: 9 back, another changed.
    sources(tmp_path, {7: "preorder", 12: "out_of_stock"})
    again = ok(specs[0])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    # 3, 9 and 12 changed: 9's old row, which the last run excluded, ruled (and excluded again), no other.
    assert from_kept[1] == (2, 3), from_kept
    assert sorted(kept_keys(database_url, again["run_id"]) or [], key=int) == [str(i) for i in range(1, 21)]
    same_as_full(run_env, again, specs)
    same_values(specs)
    assert len(renamed) >= 2 and all(renamed), renamed  # the fresh project's second run is a delta too


def test_a_kept_result_in_parts_and_a_spliced_one_through_it(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, renamed: list[bool]
) -> None:
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 10)  # the full runs' rules in two halves: a view of parts
    sources(tmp_path, n=40)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 33: "gone"}, n=40)  # 33 leaves the export: written in full from the view
    parts = ok(specs[0])
    assert parts["incremental"]["mode"] == "delta", parts["incremental"]
    assert written(parts["run_id"]) == {"feed": "full: a changed item enters or leaves the export"}
    same_as_full(run_env, parts, specs)
    same_values(specs)

    # A google-xml beside the csv: the result spliced, in order.
    sources(tmp_path)
    xml = titled(three(tmp_path, [EXPORTS[0], GOOGLE_XML]))
    ok(xml[0])
    ok(xml[1])
    sources(tmp_path, {3: "out_of_stock", 7: "preorder"})
    spliced = ok(xml[0])
    assert spliced["incremental"]["mode"] == "delta", spliced["incremental"]
    assert written(spliced["run_id"]) == {"feed": "patched", "xml": "full: google-xml is written whole"}
    same_as_full(run_env, spliced, xml)
    same_values(xml)
    assert len(renamed) >= 2 and all(renamed), renamed  # the fresh project's second run is a delta too


def test_ruled_is_a_copy_in_the_kept_results_column_order_when_the_pass_table_has_another(
    run_env: Path, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies: list[tuple[list[str], list[str], list[str]]] = []
    real = delta_rules._as_ruled

    def reordered(ctx: Any, tables: Any, new_r: Any, columns: Any) -> tuple[str, int]:
        # The kept result's columns as another run might lay them out (the last first): RULED copied in
        # that order, the pass table left as it is, the rows in `_ff_ord` order.
        other = [*columns[-1:], *columns[:-1]]
        table, n = real(ctx, tables, new_r, other)
        copies.append((other, ctx.data.schema.table_columns(ctx.spec.company, table), list(columns)))
        with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
            where = company_schema(ctx.spec.company)
            cur.execute(f'SELECT "{ORD}" FROM "{where}"."{rules_tmp_table(ctx.run_id, delta.RULED)}"')
            ords = [int(r[0]) for r in cur.fetchall()]
            cur.execute("SELECT to_regclass(%s)", (f'"{where}"."{new_r.table}"',))
            kept_pass = cur.fetchone()[0] is not None
        assert ords == sorted(ords) and len(ords) == n and kept_pass
        return table, n

    monkeypatch.setattr(delta_rules, "_as_ruled", reordered)
    specs, changed = first_delta(tmp_path)
    assert changed["incremental"]["mode"] == "delta", changed["incremental"]
    assert len(copies) == 1
    other, made, columns = copies[0]
    assert made == other != columns
    same_as_full(run_env, changed, specs)
    same_values(specs)


def with_rules(specs: tuple[Path, Path, Path], rules: list[dict[str, Any]]) -> tuple[Path, Path, Path]:
    """The three projects with `rules` before their exclusion (`low`)."""
    for path in specs:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        path.write_text(yaml.safe_dump({**spec, "rules": [*rules, *spec["rules"]]}, sort_keys=False), encoding="utf-8")
    return specs


def test_the_old_rows_flags_are_read_from_the_kept_results_parts_by_tid(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_kept: list[tuple[int, int]]
) -> None:
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 10)  # the full runs' rules in two halves: a view of parts
    sources(tmp_path, {5: "preorder", 30: "preorder"}, n=40)
    specs = with_rules(
        three(tmp_path, EXPORTS[:1]),
        [
            {
                "name": "soon",
                "when": {"field": "stock", "op": "eq", "value": "preorder"},
                "then": [{"append": "title", "value": " (soon)"}],
            },
            {
                "name": "odd",
                "when": {"field": "title", "op": "ends_with", "value": "1"},
                "then": [{"set": "price", "value": "1.00 EUR"}],
            },
            {"name": "all", "then": [{"trim": "title"}]},
        ],
    )
    ok(specs[0])
    ok(specs[1])
    # 5 and 30 (one per part) were preorder: their old rows match `soon`; 21 and 33 change without matching it.
    sources(tmp_path, {21: "out_of_stock", 33: "preorder"}, n=40)
    changed = ok(specs[0])
    assert changed["incremental"]["mode"] == "delta", changed["incremental"]
    assert from_kept[0] == (4, 4), from_kept
    same_as_full(run_env, changed, specs)
    same_values(specs)


def test_old_rows_are_ruled_when_the_kept_result_lacks_a_flag_they_need(
    run_env: Path, tmp_path: Path, database_url: str, from_kept: list[tuple[int, int]]
) -> None:
    counted: list[bool] = []
    real = delta_rules.survivor_counts

    def spy(plans: Any, columns: Any) -> Any:
        known = real(plans, columns)
        counted.append(known is not None)
        return known

    soon = {
        "name": "soon",
        "when": {"field": "stock", "op": "eq", "value": "preorder"},
        "then": [{"append": "title", "value": " (soon)"}],
    }
    # After the exclusion, a rule writing the field it reads (so not moved before it, `_plan._hoist`): its pass
    # writes a new table, without `soon`'s flag.
    later = {
        "name": "later",
        "when": {"field": "title", "op": "contains", "value": "soon"},
        "then": [{"set": "stock", "value": "soon"}],
    }
    sources(tmp_path, {5: "preorder", 9: "gone"})
    specs = three(tmp_path, EXPORTS[:1])
    for path in specs:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        path.write_text(
            yaml.safe_dump({**spec, "rules": [soon, *spec["rules"], later]}, sort_keys=False), encoding="utf-8"
        )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(delta_rules, "survivor_counts", spy)
        ok(specs[0])
        ok(specs[1])
        sources(tmp_path, {7: "preorder", 9: "in_stock"})  # 5 and 9 back, 7 now matching `soon`
        changed = ok(specs[0])
        assert changed["incremental"]["mode"] == "delta", changed["incremental"]
        assert counted[0] is False and from_kept == []  # every old row ruled, the view's rows counted
        assert written(changed["run_id"]) == {"feed": "full: a changed item enters or leaves the export"}
        same_as_full(run_env, changed, specs)
        same_values(specs)
