"""Run diffs and the drop guard (#9): exact counts, a blocked 60% drop that keeps the files, accept_drop."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import reset_settings
from firefeed.dataplane.run_tables import RunTables
from firefeed.db.engine import raw_connection
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.spec.loader import load_spec_file
from tests.integration.conftest import cli, run_json, write_csv

HEADER = ["id", "title", "price"]
EXPORTS = [
    # C3: these items are not Google-complete; the tests read diffs and the drop guard.
    {"name": "google", "format": "google-xml", "path": "g.xml", "max_invalid": "100%"},
    {"name": "titles", "format": "csv", "path": "t.csv", "fields": {"id": "id", "title": "title"}},
]


def _write(tmp: Path, project: str, items: dict[str, tuple[str, str]], exports: list[dict[str, Any]] = EXPORTS) -> Path:
    write_csv(tmp / "main.csv", HEADER, [[k, title, price] for k, (title, price) in items.items()])
    spec = {"company": "acme", "project": project, "sources": [{"name": "main", "url": "main.csv"}], "exports": exports}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def _items(keys: range) -> dict[str, tuple[str, str]]:
    return {f"K{i}": (f"item {i}", f"{i}.00 EUR") for i in keys}


def _diff(report: dict[str, Any], export: str) -> dict[str, Any]:
    return dict(next(e for e in report["exports"] if e["name"] == export)["diff"])


def _counts(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["baseline"], d["previous"], d["rows"], d["added"], d["removed"], d["changed"], d["unchanged"])


def _run_tables(run_id: str) -> list[str]:
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"export\\_tmp\\_{run_id.replace('-', '')}%",)
        )
        return [r[0] for r in cur.fetchall()]


def test_the_diff_counts_items_added_removed_and_changed_exactly(run_env: Path, tmp_path: Path) -> None:
    items = _items(range(10))
    spec = _write(tmp_path, "diff_counts", items)
    code, first = run_json(spec)
    assert code == 0, first["error"]
    d = _diff(first, "google")
    assert _counts(d) == (False, None, 10, 10, 0, 0, 0)
    assert d["samples"]["added"] == ["K0", "K1", "K2", "K3", "K4"]

    code, second = run_json(spec)
    assert code == 0, second["error"]
    assert _counts(_diff(second, "google")) == (True, 10, 10, 0, 0, 0, 10)

    del items["K0"], items["K1"]
    items["K2"] = ("item 2, renamed", "2.00 EUR")
    items["K3"] = ("item 3, renamed", "3.00 EUR")
    items["K4"] = ("item 4", "4.50 EUR")  # price only: the titles export does not write it
    items.update(_items(range(10, 13)))
    _write(tmp_path, "diff_counts", items)
    code, third = run_json(spec)
    assert code == 0, third["error"]
    google, titles = _diff(third, "google"), _diff(third, "titles")
    assert _counts(google) == (True, 10, 11, 3, 2, 3, 5)
    assert _counts(titles) == (True, 10, 11, 3, 2, 2, 6)
    assert sorted(google["samples"]["added"]) == ["K10", "K11", "K12"]
    assert sorted(google["samples"]["removed"]) == ["K0", "K1"]
    assert sorted(google["samples"]["changed"]) == ["K2", "K3", "K4"]
    assert google["drop"] == {"share": 20.0, "max_drop": 50.0, "status": "ok"}
    assert _run_tables(third["run_id"]) == []  # promoted or dropped: nothing run-scoped is left
    code, out = cli("run", str(spec))
    assert code == 0
    assert "against" in out and "11 published" in out


def test_a_primary_that_lost_60_percent_fails_on_the_guard_keeps_the_files_and_accept_drop_publishes(
    run_env: Path, tmp_path: Path
) -> None:
    spec = _write(tmp_path, "drop_guard", _items(range(1000)))
    assert run_json(spec)[0] == 0
    folder = run_env / "acme" / "drop_guard"
    before = {name: (folder / name).read_bytes() for name in ("g.xml", "t.csv")}

    _write(tmp_path, "drop_guard", _items(range(400)))
    code, report = run_json(spec)
    assert code == 1
    assert report["status"] == "FAILED"
    error = report["error"]
    assert (error["step"], error["type"]) == ("EXPORT", "DropGuardError")
    assert error["message"] == (
        "export 'google': 600 of 1000 items would be dropped (60% > max_drop 50%); "
        "re-run with --accept-drop to publish anyway; "
        "export 'titles': 600 of 1000 items would be dropped (60% > max_drop 50%); "
        "re-run with --accept-drop to publish anyway"
    )
    for name in ("google", "titles"):
        d = _diff(report, name)
        assert _counts(d) == (True, 1000, 400, 0, 600, 0, 400)
        assert d["drop"] == {"share": 60.0, "max_drop": 50.0, "status": "blocked"}
    assert {name: (folder / name).read_bytes() for name in ("g.xml", "t.csv")} == before
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert _run_tables(report["run_id"]) == []

    code, out = cli("run", str(spec), "--accept-drop")
    assert code == 0, out
    assert "drop 60% > max_drop 50% accepted" in out
    assert (folder / "t.csv").read_text(encoding="utf-8").count("\n") == 401
    # The accepted run is the new baseline: the next run compares with its 400 items.
    code, after = run_json(spec)
    assert code == 0
    assert _counts(_diff(after, "titles")) == (True, 400, 400, 0, 0, 0, 400)


def test_max_drop_is_per_export_and_names_only_the_export_that_blocks(run_env: Path, tmp_path: Path) -> None:
    exports = [
        {"name": "strict", "format": "csv", "path": "s.csv", "max_drop": "10%"},
        {"name": "loose", "format": "jsonl", "path": "l.jsonl", "max_drop": "70"},
        {"name": "any", "format": "csv", "path": "a.csv", "max_drop": "100%"},
    ]
    spec = _write(tmp_path, "drop_each", _items(range(10)), exports)
    assert run_json(spec)[0] == 0
    _write(tmp_path, "drop_each", _items(range(2, 10)), exports)  # 20% fewer
    code, report = run_json(spec)
    assert code == 1
    assert report["error"]["message"] == (
        "export 'strict': 2 of 10 items would be dropped (20% > max_drop 10%); "
        "re-run with --accept-drop to publish anyway"
    )
    assert [_diff(report, n)["drop"]["status"] for n in ("strict", "loose", "any")] == ["blocked", "ok", "ok"]


def test_a_spec_with_a_bad_quality_option_exits_2_naming_the_key(run_env: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cases = {
        "max_drop": ("150%", "exports[0].max_drop: must be a percentage between 0% and 100% such as 50%, got '150%'"),
        "channel": ("bing", "exports[0].channel: must be one of google, meta or none"),
        "fail_on": ("always", "exports[0].fail_on: must be one of error, warning or none"),
    }
    for key, (value, message) in cases.items():
        spec = _write(
            tmp_path, "bad_quality", _items(range(3)), [{"name": "c", "format": "csv", "path": "c.csv", key: value}]
        )
        assert cli("run", str(spec))[0] == 2
        assert message in capsys.readouterr().err
    spec = _write(
        tmp_path, "bad_quality", _items(range(3)), [{"name": "c", "format": "csv", "path": "c.csv", "fail_on": "error"}]
    )
    assert cli("run", str(spec))[0] == 2
    assert "exports[0].fail_on: needs a channel whose rules it can check" in capsys.readouterr().err


def test_through_the_queues_the_guard_blocks_and_accept_drop_publishes(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Celery driver: the same guard, and accept_drop carried by the run request."""
    from tests.integration.celery_workers import in_process_worker, use_broker
    from tests.integration.test_distributed import wait_finished

    exports_dir = tmp_path / "exports"
    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(exports_dir))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "var"))
    reset_settings()
    spec = _write(tmp_path, "drop_dist", _items(range(50)))
    RunStore().apply_spec(load_spec_file(spec), spec_dir=tmp_path)
    use_broker("memory://")
    try:
        with in_process_worker():
            first = wait_finished(start_run("drop_dist", "api"))
            assert first["status"] == "SUCCEEDED", first["error"]
            published = (exports_dir / "acme" / "drop_dist" / "t.csv").read_bytes()
            _write(tmp_path, "drop_dist", _items(range(20)))
            blocked = wait_finished(start_run("drop_dist", "api"))
            kept = (exports_dir / "acme" / "drop_dist" / "t.csv").read_bytes()
            accepted = wait_finished(start_run("drop_dist", "api", accept_drop=True))
    finally:
        reset_settings()
    assert kept == published
    assert blocked["status"] == "FAILED"
    assert blocked["error"]["type"] == "DropGuardError"
    assert "30 of 50 items would be dropped (60% > max_drop 50%)" in blocked["error"]["message"]
    assert _counts(_diff(blocked, "google")) == (True, 50, 20, 0, 30, 0, 20)
    assert published != (exports_dir / "acme" / "drop_dist" / "t.csv").read_bytes()
    assert accepted["status"] == "SUCCEEDED", accepted["error"]
    assert _diff(accepted, "google")["drop"]["status"] == "accepted"


def test_the_janitor_drops_a_crashed_runs_export_tables_but_not_a_live_ones(run_env: Path, tmp_path: Path) -> None:
    from firefeed.runs.maintenance import drop_orphan_tmp_tables
    from firefeed.schema.service import SchemaService

    spec = _write(tmp_path, "janitor_keys", _items(range(3)))
    RunStore().apply_spec(load_spec_file(spec), spec_dir=tmp_path)
    live = RunStore().request_run("janitor_keys", "api")
    crashed = str(uuid.uuid4())  # no such run any more: its tables are orphans
    schema = SchemaService()
    schema.create_export_tmp("acme", live, 0, with_id=False)
    orphan = schema.create_export_tmp("acme", crashed, 1, with_id=True)
    try:
        assert f"company_acme.{orphan}" in drop_orphan_tmp_tables()
        assert _run_tables(crashed) == []
        assert len(_run_tables(live)) == 1
    finally:
        RunStore().request_cancel(live)
        RunTables(schema).drop_export_tmp_for_run("acme", live)
    assert _run_tables(live) == []


def test_the_published_baseline_is_a_logged_table_that_crash_recovery_keeps(run_env: Path, tmp_path: Path) -> None:
    """The drop guard's baseline must survive a Postgres crash: an UNLOGGED table would come back empty."""
    from firefeed.schema.identifiers import company_schema, published_keys_table

    spec = _write(tmp_path, "durable_base", _items(range(20)))
    assert run_json(spec)[0] == 0
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT c.relname, c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (
                company_schema("acme"),
                [published_keys_table("durable_base", e["name"]) for e in EXPORTS],
            ),
        )
        persistence = dict(cur.fetchall())
    assert sorted(persistence.values()) == ["p", "p"], persistence  # p: permanent (WAL-logged)


def full_run(spec: Path) -> tuple[int, dict[str, Any]]:
    """`firefeed run SPEC --json --full`: every item recomputed, even when nothing changed (SPEC 11 I2)."""
    code, out = cli("run", str(spec), "--json", "--full")
    return code, json.loads(out)


def test_a_small_runs_merge_and_exports_do_their_side_work_on_the_jobs_one_connection(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a step pool process's one idle connection, a 10-item run's key counts and diffs come first on
    the connection the step then uses: fewer connections opened than with them beside it, same report."""
    from sqlalchemy import event

    from firefeed.db import engine as db

    spec = _write(tmp_path, "side_work", _items(range(10)))
    assert run_json(spec)[0] == 0  # the first run publishes a baseline: the later ones diff against it
    db.dispose_engines()
    monkeypatch.setattr(db, "_idle_pool", 1)  # as in a step worker's pool process (worker_pool_process)

    def opened(side_by_side: bool) -> tuple[int, dict[str, Any]]:
        with monkeypatch.context() as m:
            if side_by_side:
                m.setattr(db, "SIDE_CONNECTION_MIN_ROWS", 0)
            assert full_run(spec)[0] == 0  # warm: the pool holds what it keeps
            connects: list[int] = []
            listener = lambda *_: connects.append(1)  # noqa: E731
            event.listen(db.get_engine(), "connect", listener)
            try:
                code, report = full_run(spec)  # the same inputs: --full, or the run reuses the last one
            finally:
                event.remove(db.get_engine(), "connect", listener)
            assert code == 0, report
            return len(connects), report

    try:
        beside, before = opened(side_by_side=True)
        first, after = opened(side_by_side=False)
    finally:
        db.dispose_engines()
    assert first < beside, (first, beside)
    for report in (before, after):
        assert [(e["rows"], _diff(report, e["name"])["unchanged"]) for e in report["exports"]] == [(10, 10)] * 2
    assert [e["sha256"] for e in after["exports"]] == [e["sha256"] for e in before["exports"]]


def test_a_json_export_counts_a_list_whose_elements_or_kind_changed_as_changed(run_env: Path, tmp_path: Path) -> None:
    """json writes ["x,y"], ["x", "y"] and "x,y" apart, so its diff does; csv writes x,y for all three."""
    exports = [
        {"name": "json", "format": "json", "path": "o.json", "fields": {"id": "id", "tags": "tags"}},
        {"name": "csv", "format": "csv", "path": "o.csv", "fields": {"id": "id", "tags": "tags"}},
    ]

    def run(separator: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        write_csv(tmp_path / "main.csv", ["id", "tags"], [["1", "x,y"], ["2", "z"]])
        source = {"name": "main", "url": "main.csv", "lists": {"tags": separator}}
        spec = {"company": "acme", "project": "diff_lists", "sources": [source], "rules": rules, "exports": exports}
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
        code, report = run_json(tmp_path / "spec.yaml")
        assert code == 0, report["error"]
        return report

    run("|", [])  # item 1 is ["x,y"], item 2 ["z"]
    second = run(",", [])  # item 1 is ["x", "y"]: the same csv row
    assert (_diff(second, "json")["changed"], _diff(second, "csv")["changed"]) == (1, 0)
    third = run(",", [{"name": "joined", "then": [{"join": "tags", "separator": ","}]}])  # "x,y" and "z": texts
    assert (_diff(third, "json")["changed"], _diff(third, "csv")["changed"]) == (2, 0)
