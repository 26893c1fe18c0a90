"""A delta's RULES over only what the changed fields reach (#52, pipeline/delta_slice.py): a stock refresh whose
changed field three of five rules need (one decides on it, one reads what that one writes, one writes what
that one reads) rules its changed items through those three, takes every other column from their kept rows,
and gives the files and report of a `--full` run and of a fresh project: the counts of the rule deciding on
the changed field, the rows the last run excluded (ruled in full, excluded again). Where slicing is not exact
(an exclusion decides on the changed field) every rule runs, and the step's detail says which it was."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine

from firefeed.runs.contract import Step
from firefeed.runs.service import RunStore
from tests.integration.test_incremental import ok, run
from tests.integration.test_parse_patch import SOURCES, files, write_main
from tests.integration.test_parse_patch_enrich import same_as_full_and_fresh, write_stock

pytestmark = pytest.mark.integration

#: `level` decides on the stock; `note` reads what it writes and the title `upper` writes; `outlet` excludes by
#: the title, `cheap` reads the price: neither needs the stock
RULES: list[dict[str, Any]] = [
    {"name": "upper", "then": [{"uppercase": "title"}]},
    {"name": "outlet", "when": {"field": "title", "op": "contains", "value": "OUTLET"}, "then": [{"exclude": True}]},
    {
        "name": "level",
        "when": {"field": "stock", "op": "lt", "value": "2"},
        "then": [{"set": "label", "value": "low"}],
        "else": [{"set": "label", "value": "ok"}],
    },
    {"name": "note", "then": [{"set": "note", "value": "{label}: {title}"}]},
    {
        "name": "cheap",
        "when": {"field": "price", "op": "lt", "value": "10"},
        "then": [{"set": "tag", "value": "cheap"}],
    },
]
#: the same, the exclusion deciding on the stock: no slice is exact
EXCLUDING_BY_STOCK: list[dict[str, Any]] = [
    *RULES[:1],
    {"name": "outlet", "when": {"field": "stock", "op": "eq", "value": "0"}, "then": [{"exclude": True}]},
    *RULES[2:],
]
#: the stock read by an action only (as the benchmark's availability): no count can change
WRITING_STOCK: list[dict[str, Any]] = [
    *RULES[:2],
    {"name": "level", "then": [{"set": "label", "value": "stock {stock}"}]},
    *RULES[3:],
]
FIELDS = {
    "id": "{id}",
    "title": "{title}",
    "price": "{price}",
    "stock": "{stock}",
    "label": "{label}",
    "note": "{note}",
    "tag": "{tag}",
}


def main_rows() -> list[list[str]]:
    rows = [[str(i), f"item {i}", str(i), f"b{i % 3}"] for i in range(1, 41)]
    for i in (5, 17, 30):
        rows[i - 1][1] = f"outlet item {i}"  # excluded by `outlet`
    return rows


def stock_lines() -> list[str]:
    return [f"{i},{i % 5}" for i in range(1, 41)]


def start(tmp: Path, rules: list[dict[str, Any]]) -> list[Path]:
    """Three projects of the same spec (refreshed, its `--full` twin, a fresh one), the first two run."""
    write_main(tmp, main_rows())
    write_stock(tmp, stock_lines())
    specs = []
    for _ in range(3):
        project = f"sl{uuid.uuid4().hex[:8]}"
        doc: dict[str, Any] = {
            "company": "increfresh",
            "project": project,
            "key": "id",
            "sources": SOURCES,
            "rules": rules,
            "exports": [{"name": "feed", "path": "feed.csv", "format": "csv", "fields": FIELDS}],
        }
        path = tmp / f"{project}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        specs.append(path)
    for spec in specs[:-1]:
        ok(spec)
    return specs


def ruled_by(run_id: str) -> str:
    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.RULES)
    return str(detail.get("ruled_by"))


def test_a_stock_refresh_rules_its_items_through_the_rules_the_stock_reaches(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    refreshed, full, fresh = start(tmp_path, RULES)
    lines = stock_lines()
    lines[0] = "1,4"  # item 1: low -> ok
    lines[7] = "8,0"  # item 8: ok -> low
    lines[16] = "17,0"  # item 17: excluded by `outlet` before and after (the kept result lacks it)
    lines[39] = "40,3"  # item 40, the last record: low -> ok
    write_stock(tmp_path, lines)
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert report["incremental"]["items_changed"] == 4, report["incremental"]
    assert ruled_by(report["run_id"]) == "slice: 3 rules (stock changed)"
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)
    detail = next(dict(st.detail or {}) for st in RunStore().steps(report["run_id"]) if st.step == Step.RULES)
    # `level` matched 14 of the 37 items `outlet` keeps: two fewer (items 1 and 40), one more (item 8).
    assert dict(detail["matched"])["level"] == 13 and detail["excluded"] == 3, detail

    # Again, on the result the slice kept: the changed items' flags are the slice's.
    lines[0], lines[7] = "1,0", "8,3"
    write_stock(tmp_path, lines)
    again = ok(refreshed)
    assert ruled_by(again["run_id"]) == "slice: 3 rules (stock changed)"
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)


def test_a_stock_refresh_no_rule_decides_on_changes_no_count(patch_env: Path, tmp_path: Path, engine: Engine) -> None:
    refreshed, full, fresh = start(tmp_path, WRITING_STOCK)
    lines = stock_lines()
    lines[1] = "2,9"
    lines[16] = "17,9"  # item 17: excluded by `outlet`, and still
    lines[29] = "30,9"  # item 30: the same
    write_stock(tmp_path, lines)
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta" and report["incremental"]["items_changed"] == 3
    assert ruled_by(report["run_id"]) == "slice: 3 rules (stock changed); no count changes (no old row read)"
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_no_count_changes_without_the_kept_rows_found_beside_merge(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No old row is read where no count can change: without the kept rows found beside MERGE (as where RULES fans
    out) every rule runs over the new rows, which count as the old did, and the kept result is scanned for them."""
    from firefeed.pipeline import delta_rules

    refreshed, full, fresh = start(tmp_path, WRITING_STOCK)
    lines = stock_lines()
    lines[3], lines[16] = "4,8", "17,8"
    write_stock(tmp_path, lines)
    # Neither search begins beside PARSE: by the keys read from the records' bytes, nor by their staged rows.
    monkeypatch.setattr(delta_rules.EarlyFound, "of_keys", classmethod(lambda cls, *a, **k: None))
    monkeypatch.setattr(delta_rules.EarlyFound, "of_records", classmethod(lambda cls, *a, **k: None))
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta" and report["incremental"]["items_changed"] == 2
    assert ruled_by(report["run_id"]) == "every rule; no count changes (no old row read)"
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_an_exclusion_deciding_on_the_changed_field_rules_every_rule(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    refreshed, full, fresh = start(tmp_path, EXCLUDING_BY_STOCK)
    lines = stock_lines()
    lines[2] = "3,0"  # item 3: excluded now
    lines[4] = "5,2"  # item 5 (stock 0 before): back
    write_stock(tmp_path, lines)
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert ruled_by(report["run_id"]) == "every rule"
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_the_kept_rows_searched_while_parse_runs_are_taken_only_for_the_one_source_patched(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search begun once PARSE staged the stock's changed records (delta_rules.PatchWatch) is the one RULES
    takes; when the primary changed too (a full run) it is discarded, its tables dropped."""
    from firefeed.pipeline import delta_rules

    taken: list[bool] = []
    discarded: list[str] = []
    take, discard = delta_rules.PatchWatch.take, delta_rules.EarlyFound.discard

    def spied(self: delta_rules.PatchWatch, parsed: Any) -> Any:
        early = take(self, parsed)
        if parsed:
            taken.append(early is not None)
        return early

    def dropped(self: delta_rules.EarlyFound, ctx: Any) -> None:
        discard(self, ctx)
        discarded.append(ctx.run_id)

    monkeypatch.setattr(delta_rules.PatchWatch, "take", spied)
    monkeypatch.setattr(delta_rules.EarlyFound, "discard", dropped)
    refreshed, full, fresh = start(tmp_path, WRITING_STOCK)
    lines = stock_lines()
    lines[5] = "6,7"
    write_stock(tmp_path, lines)
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta" and taken == [True] and not discarded
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)

    rows = main_rows()
    rows[9][1] = "item ten, edited"
    write_main(tmp_path, rows)
    lines[6] = "7,7"
    write_stock(tmp_path, lines)
    again = ok(refreshed)
    assert again["incremental"]["mode"] == "full" and taken == [True], again["incremental"]
    # Begun for each patched source's records while PARSE ran (the stock's, the primary's), none used.
    assert discarded and set(discarded) == {again["run_id"]}, discarded
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)


def test_the_kept_result_change_rules_begins_is_the_one_committed_after_the_publish(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no count changes, RULES begins the kept result's change as soon as it found the changed items' kept
    rows, before their ruled rows are made (`PreparedKeep`, rows_ready False): that change is the one committed
    after the publish, no second one is begun, and the kept result is what a full run keeps."""
    from firefeed.dataplane import kept

    begun: list[bool] = []
    committed: list[bool] = []
    init, commit = kept.PreparedKeep.__init__, kept.PreparedKeep.commit

    def spied_init(self: kept.PreparedKeep, *args: Any, rows_ready: bool = True) -> None:
        begun.append(rows_ready)
        init(self, *args, rows_ready=rows_ready)

    def spied_commit(self: kept.PreparedKeep) -> str | None:
        committed.append(self._rows.is_set())
        return commit(self)

    monkeypatch.setattr(kept.PreparedKeep, "__init__", spied_init)
    monkeypatch.setattr(kept.PreparedKeep, "commit", spied_commit)
    refreshed, full, fresh = start(tmp_path, WRITING_STOCK)
    lines = stock_lines()
    lines[1], lines[29] = "2,9", "30,9"  # item 30: excluded by `outlet` (the kept result lacks it)
    write_stock(tmp_path, lines)
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta" and report["incremental"]["items_changed"] == 2
    assert ruled_by(report["run_id"]) == "slice: 3 rules (stock changed); no count changes (no old row read)"
    assert begun == [False] and committed == [True], (begun, committed)
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_a_delta_failing_after_rules_began_the_keep_leaves_the_kept_result_as_it_was(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change RULES began (its DELETE done, uncommitted) is rolled back when the run fails: the last succeeded
    run's kept result holds every row it held, and the next run (full, as after any failure past MERGE) gives
    what a full run and a fresh project give."""
    from sqlalchemy import text

    from firefeed.dataplane import kept
    from firefeed.dataplane.names import kept_result_table
    from firefeed.schema.identifiers import company_schema

    refreshed, full, fresh = start(tmp_path, WRITING_STOCK)
    last = RunStore().runs_of_project(refreshed.stem, limit=1)[0]

    def kept_rows() -> list[tuple[str, str]]:
        table = f'"{company_schema("increfresh")}"."{kept_result_table(str(last.id))}"'
        with engine.connect() as conn:
            return sorted((str(k), str(v)) for k, v in conn.execute(text(f'SELECT "_ff_key", label FROM {table}')))

    before = kept_rows()
    assert ("4", "stock 4") in before and len(before) == 37
    lines = stock_lines()
    lines[3] = "4,9"
    write_stock(tmp_path, lines)

    def failing(self: kept.PreparedKeep) -> None:
        raise RuntimeError("RULES failed once its ruled rows were made")

    with monkeypatch.context() as m:
        m.setattr(kept.PreparedKeep, "rows_ready", failing)
        code, failed = run(refreshed)
    assert code != 0 and failed["status"] == "FAILED" and failed["error"]["step"] == "RULES", failed
    assert kept_rows() == before
    again = ok(refreshed)
    assert again["incremental"]["mode"] == "full", again["incremental"]
    # Its report's FETCH differs from a full twin's (the failed run read the stock already): the files are compared.
    ok(full, "--full")
    ok(fresh)
    assert files(patch_env, refreshed.stem) == files(patch_env, full.stem) == files(patch_env, fresh.stem)
