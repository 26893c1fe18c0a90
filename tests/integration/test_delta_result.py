"""A delta run's rules result (#52): when every export is patched, the last result is not copied; the run
views it with the changed items' rows replaced, and once published keeps it by changing it in place. Either
way `firefeed values`, the files and the report are a full run's, and a delta builds on a delta."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml
from psycopg2 import sql

from firefeed.dataplane import kept
from firefeed.dataplane.names import kept_result_table, rules_tmp_table
from firefeed.pipeline import rule_passes
from firefeed.schema.identifiers import KEY, company_schema, ident
from tests.integration.conftest import cli
from tests.integration.test_incremental import ok, run
from tests.integration.test_incremental_export import EXPORTS, first_delta, same_as_full, sources, three, written

pytestmark = pytest.mark.integration

GOOGLE_XML: dict[str, Any] = {
    "name": "xml",
    "path": "feed.xml",
    "format": "google-xml",
    "channel": "google",
    "max_invalid": 100,
    "fields": {"id": "id", "title": "title", "price": "price", "availability": "stock"},
}


def titled(specs: tuple[Path, Path, Path]) -> tuple[Path, Path, Path]:
    """The three projects under one title: a google-xml file holds it."""
    for path in specs:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        path.write_text(yaml.safe_dump({**spec, "name": "Feed"}, sort_keys=False), encoding="utf-8")
    return specs


def values(project: str) -> list[dict[str, Any]]:
    code, out = cli("values", project, "stock", "--json")
    assert code == 0, out
    return list(json.loads(out)["values"])


def kept_keys(database_url: str, run_id: str) -> list[str] | None:
    """The keys of the result run `run_id` kept, as a scan reads them (None: it kept none)."""
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (f'"{company_schema("increfresh")}"."{kept_result_table(run_id)}"',))
            if cur.fetchone()[0] is None:
                return None
            cur.execute(f'SELECT "{KEY}" FROM "{company_schema("increfresh")}"."{kept_result_table(run_id)}"')
            return [str(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()


def same_values(specs: tuple[Path, Path, Path]) -> None:
    """The refreshed project's `values` are the --full run's (same_as_full ran it last)."""
    assert values(specs[0].stem) == values(specs[1].stem)


def test_a_delta_whose_exports_are_all_patched_changes_the_kept_result_in_place(
    run_env: Path, tmp_path: Path, database_url: str
) -> None:
    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    first = ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 7: "preorder"})
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {"feed": "patched"}
    # The last run's result is now this run's, its changed rows last: changed in place, not copied in order.
    assert kept_keys(database_url, first["run_id"]) is None
    assert kept_keys(database_url, delta["run_id"]) == [str(i) for i in range(1, 21) if i not in (3, 7)] + ["3", "7"]
    same_as_full(run_env, delta, specs)
    same_values(specs)

    # A delta on that delta, one item back and another changed.
    sources(tmp_path, {7: "preorder", 12: "out_of_stock"})
    again = ok(specs[0])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert written(again["run_id"]) == {"feed": "patched"}
    assert kept_keys(database_url, delta["run_id"]) is None
    assert sorted(kept_keys(database_url, again["run_id"]) or [], key=int) == [str(i) for i in range(1, 21)]
    same_as_full(run_env, again, specs)
    same_values(specs)


def test_the_keep_deletes_the_changed_rows_by_the_tids_found_beside_the_export_else_by_a_scan(
    run_env: Path, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_tid: list[bool] = []
    real = kept._delete_by_tid

    def spy(cur: Any, where: str, run_id: str, heaps: Any, changed: Any) -> bool:
        if by_tid:  # the second delta: its rows' table emptied, as crash recovery empties an UNLOGGED table
            cur.execute(sql.SQL("TRUNCATE {}").format(ident(where, rules_tmp_table(run_id, kept.CHANGED_ROWS))))
        by_tid.append(real(cur, where, run_id, heaps, changed))
        return by_tid[-1]

    monkeypatch.setattr(kept, "_delete_by_tid", spy)
    specs, delta = first_delta(tmp_path)
    assert written(delta["run_id"]) == {"feed": "patched"}
    assert by_tid == [True]
    assert kept_keys(database_url, delta["run_id"]) == [str(i) for i in range(1, 21) if i not in (3, 7)] + ["3", "7"]
    same_as_full(run_env, delta, specs)
    same_values(specs)

    sources(tmp_path, {7: "preorder", 12: "out_of_stock"})
    again = ok(specs[0])
    assert written(again["run_id"]) == {"feed": "patched"}
    assert by_tid == [True, False]  # none found: the heaps scanned, as before
    assert sorted(kept_keys(database_url, again["run_id"]) or [], key=int) == [str(i) for i in range(1, 21)]
    same_as_full(run_env, again, specs)
    same_values(specs)


def test_the_rows_the_rules_found_are_the_keeps_the_kept_result_is_not_scanned_again(
    run_env: Path, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delta's RULES finds the kept result's rows of the changed items for its counts; the EXPORT takes
    that table for the keep instead of scanning the kept result a second time."""
    made: list[int] = []
    real = kept.SchemaService.create_rules_tmp_as

    def spy(self: Any, company: str, run_id: str, pass_no: int, *args: Any, **kwargs: Any) -> tuple[str, int]:
        made.append(pass_no)
        return real(self, company, run_id, pass_no, *args, **kwargs)

    noted: list[tuple[int | None, int]] = []
    real_find = kept.find_changed_rows

    def find(*args: Any, **kwargs: Any) -> int | None:
        before = len(made)
        found = real_find(*args, **kwargs)
        noted.append((found, len(made) - before))
        return found

    monkeypatch.setattr(kept.SchemaService, "create_rules_tmp_as", spy)
    monkeypatch.setattr(kept, "find_changed_rows", find)
    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 7: "preorder"})
    made.clear()
    delta = ok(specs[0])
    assert written(delta["run_id"]) == {"feed": "patched"}
    assert made.count(kept.CHANGED_ROWS) == 1  # made once, by the RULES: the EXPORT's look made none
    assert noted == [(2, 0)]
    assert kept_keys(database_url, delta["run_id"]) is not None
    same_as_full(run_env, delta, specs)
    same_values(specs)


def test_a_kept_result_in_parts_is_changed_in_place_part_by_part(
    run_env: Path, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 10)  # the full runs' rules in two halves: a view of parts
    sources(tmp_path, n=40)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 33: "gone"}, n=40)  # 33 leaves the export: written in full, sorted
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {"feed": "full: a changed item enters or leaves the export"}
    # The rule `low` excludes 33: only 3's new row is added, to the last part.
    assert kept_keys(database_url, delta["run_id"]) == [str(i) for i in range(1, 41) if i not in (3, 33)] + ["3"]
    same_as_full(run_env, delta, specs)
    same_values(specs)

    sources(tmp_path, {33: "preorder"}, n=40)
    again = ok(specs[0])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert sorted(kept_keys(database_url, again["run_id"]) or [], key=int) == [str(i) for i in range(1, 41)]
    same_as_full(run_env, again, specs)
    same_values(specs)


def test_a_delta_with_an_export_written_whole_splices_the_result_in_order(
    run_env: Path, tmp_path: Path, database_url: str
) -> None:
    sources(tmp_path)
    specs = titled(three(tmp_path, [EXPORTS[0], GOOGLE_XML]))
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 7: "preorder"})
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {"feed": "patched", "xml": "full: google-xml is written whole"}
    assert kept_keys(database_url, delta["run_id"]) == [str(i) for i in range(1, 21)]
    same_as_full(run_env, delta, specs)
    same_values(specs)

    sources(tmp_path)
    again = ok(specs[0])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert kept_keys(database_url, again["run_id"]) == [str(i) for i in range(1, 21)]
    same_as_full(run_env, again, specs)
    same_values(specs)


def test_the_keep_begun_beside_the_export_is_committed_once_published_else_kept_in_place_after(
    run_env: Path, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept result's change is made while EXPORT runs (`kept.PreparedKeep`) and committed after the
    publish; when making it beside fails, the keep after the publish makes it as before."""
    threads: list[str] = []
    real = kept._replace_rows

    def spy(cur: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        if len(threads) == 2:  # the second delta's first try, beside its EXPORT
            raise psycopg2.OperationalError("the connection was lost")
        return real(cur, *args, **kwargs)

    monkeypatch.setattr(kept, "_replace_rows", spy)
    specs, delta = first_delta(tmp_path)
    assert threads == ["keep-in-place"]
    assert kept_keys(database_url, delta["run_id"]) == [str(i) for i in range(1, 21) if i not in (3, 7)] + ["3", "7"]
    same_as_full(run_env, delta, specs)
    same_values(specs)

    sources(tmp_path, {7: "preorder", 12: "out_of_stock"})
    again = ok(specs[0])
    assert threads[1] == "keep-in-place" and len(threads) == 3  # failed beside, then kept after the publish
    assert kept_keys(database_url, delta["run_id"]) is None
    assert sorted(kept_keys(database_url, again["run_id"]) or [], key=int) == [str(i) for i in range(1, 21)]
    same_as_full(run_env, again, specs)
    same_values(specs)


def test_a_delta_that_fails_after_its_rules_leaves_the_last_result_and_its_values_as_they_were(
    run_env: Path, tmp_path: Path, database_url: str
) -> None:
    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    first = ok(specs[0])
    ok(specs[1])
    before = values(specs[0].stem)
    # Eleven of twenty items excluded now: the drop guard (max_drop 50%) blocks the publish, after RULES.
    sources(tmp_path, dict.fromkeys(range(1, 12), "gone"))
    code, blocked = run(specs[0])
    assert code != 0 and blocked["status"] == "FAILED", blocked
    assert blocked["incremental"]["mode"] == "delta", blocked["incremental"]
    assert values(specs[0].stem) == before
    assert kept_keys(database_url, first["run_id"]) == [str(i) for i in range(1, 21)]

    # The next run is full (its items changed by a run that did not succeed), a delta again after it.
    sources(tmp_path, {3: "out_of_stock"})
    after = ok(specs[0])
    assert after["incremental"]["mode"] == "full", after["incremental"]
    same_as_full(run_env, after, specs)
    same_values(specs)
    sources(tmp_path)
    again = ok(specs[0])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    same_as_full(run_env, again, specs)
    same_values(specs)
