"""N projects of 3 companies started together, round after round, on real workers with the janitor running.

Also the SchemaService races the pipeline relies on, driven directly from threads:
simultaneous `rules_tmp_*` creation (and the company schema under it), concurrent
addColumn on one company, and the janitor dropping orphans while runs are live.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import get_settings
from firefeed.dataplane.names import rules_tmp_table
from firefeed.dataplane.run_tables import RunTables
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.schema.service import SchemaService
from firefeed.spec.loader import load_spec_file
from tests.integration.conftest import run_json
from tests.integration.test_distributed import _spec, wait_finished
from tests.services import requires_redis
from tests.stress._fleet import (
    database_backends,
    describe_backends,
    export_body,
    export_rows,
    fleet_env,
    run_tables,
    running_fleet,
    unpublished_files,
    wait_backends_at_most,
)

COMPANIES = ("acme_s", "beta_s", "gamma_s")
ROUNDS = 3
ITEMS = 300


def _all_at_once(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Call fn(0..n-1) from n threads released together by a barrier; re-raises the first error."""
    barrier = threading.Barrier(n)

    def go(i: int) -> Any:
        barrier.wait(timeout=30)
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


def _add_round_field(folder: Path, round_no: int) -> None:
    """Each round the append source brings one more field, so every project table gets addColumn'ed."""
    spec = yaml.safe_load((folder / "spec.yaml").read_text(encoding="utf-8"))
    lines = [
        line.rstrip("}") + "".join(f', "r{r}": "v{r}"' for r in range(2, round_no + 1)) + "}"
        for line in (folder / "extra.jsonl").read_text(encoding="utf-8").splitlines()
        if line
    ]
    (folder / "extra.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")


def _reference(base: Path, round_no: int) -> dict[str, tuple[bytes, int]]:
    """The batch driver's exports for this round's data: {export name: (items as written, rows)}."""
    folder = base / f"ref_{round_no}"
    _spec(folder, "ref_s", f"ref_{round_no}", items=ITEMS)
    _add_round_field(folder, round_no)
    code, report = run_json(folder / "spec.yaml")
    assert code == 0, report["error"]
    return {e["name"]: (export_body(get_settings().export_dir / e["path"]), e["rows"]) for e in report["exports"]}


def _janitor_loop(stop: threading.Event, dropped: list[str], errors: list[BaseException]) -> None:
    """The janitor, as often as it can go, while the runs are live: it must never take a live run's table."""
    from firefeed.runs.maintenance import drop_orphan_tmp_tables

    while not stop.is_set():
        try:
            dropped.extend(drop_orphan_tmp_tables())
        except BaseException as err:  # collected, the test fails on it
            errors.append(err)
            return
        time.sleep(0.05)


@requires_redis
@pytest.mark.parametrize("n", [3, 8])
def test_n_projects_of_three_companies_started_together_round_after_round_lose_nothing(
    n: int, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stress_tally: Any
) -> None:
    env = fleet_env(database_url, tmp_path, PIPELINE_CONCURRENCY=str(n), FIREFEED_WEB_POOL_SIZE="2")
    baseline = database_backends(database_url)
    projects = [(COMPANIES[i % 3], f"conc{n}_{i}") for i in range(n)]
    with running_fleet(env, monkeypatch, tmp_path / "logs") as fleet:
        store = RunStore()
        for company, project in projects:
            _spec(tmp_path / project, company, project, items=ITEMS)
        idle_after_round: list[int] = []
        for round_no in range(1, ROUNDS + 1):
            expected = _reference(tmp_path, round_no)
            for _company, project in projects:
                _add_round_field(tmp_path / project, round_no)
                spec_path = tmp_path / project / "spec.yaml"
                store.apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
            stop = threading.Event()
            dropped: list[str] = []
            janitor_errors: list[BaseException] = []
            janitor = threading.Thread(target=_janitor_loop, args=(stop, dropped, janitor_errors), daemon=True)
            janitor.start()
            try:
                run_ids = _all_at_once(n, lambda i: start_run(projects[i][1], "api"))
                reports = [wait_finished(r, timeout=240) for r in run_ids]
            finally:
                stop.set()
                janitor.join(timeout=30)
            stress_tally.run(len(reports))
            assert not janitor_errors, janitor_errors
            assert [r["status"] for r in reports] == ["SUCCEEDED"] * n, [r["error"] for r in reports]
            lost = 0
            for report in reports:
                by_name = {e["name"]: e for e in report["exports"]}
                for name, (body, rows) in expected.items():
                    found = export_rows(get_settings().export_dir / by_name[name]["path"])
                    lost += max(rows - found, 0)
                    assert export_body(get_settings().export_dir / by_name[name]["path"]) == body, (
                        report["project"],
                        name,
                    )
                    assert found == rows, (report["project"], name, found, rows)
            stress_tally.lose(lost)
            assert not [t for t in dropped if any(r.replace("-", "") in t for r in run_ids)], (
                f"the janitor dropped a live run's table: {dropped}"
            )
            # Each run drops its own pass tables when it ends.
            assert run_tables() == []
            assert unpublished_files(Path(env["FIREFEED_EXPORT_DIR"])) == []
            idle_after_round.append(database_backends(database_url))
        # Pools are bounded: a step worker's pool process keeps at most one idle connection and a pipeline
        # one two (its driver's wakeups and statements), so however many rounds ran, the idle connections
        # stay within SPEC 1's budget (one per step slot, the web pool) plus two per pipeline slot, above
        # what the database had before the fleet.
        from firefeed.concurrency import Concurrency

        slots = (int(env[f"{q}_CONCURRENCY"]) for q in ("PIPELINE", "IMPORT", "RULES", "EXPORT"))
        budget = Concurrency(*slots).connections_needed(int(env["FIREFEED_WEB_POOL_SIZE"])) + 2 * n
        assert max(idle_after_round) - baseline <= budget, (idle_after_round, baseline, budget)
        errors = [line for line in fleet.log_text().splitlines() if " ERROR " in line]
        assert errors == [], errors[:5]
    # Once the workers are gone, so are their connections.
    assert wait_backends_at_most(database_url, baseline) <= baseline, describe_backends(database_url)


# -- the SchemaService races, driven directly -------------------------------------------------
THREADS = 12


def test_rules_tmp_tables_created_at_once_in_a_new_company_all_exist(database_url: str) -> None:
    schema = SchemaService()
    company = f"race_{uuid.uuid4().hex[:8]}"
    run_ids = [str(uuid.uuid4()) for _ in range(THREADS)]

    def create(i: int) -> str:
        schema.create_company_schema(company)
        return schema.create_rules_tmp(company, run_ids[i], 1 + i % 2, ["title", "price"], [("_ff_m1", "boolean")])

    tables = _all_at_once(THREADS, create)
    assert sorted(t for _, t in RunTables(schema).list_rules_tmp(company)) == sorted(tables)
    for i, table in enumerate(tables):
        assert schema.table_columns(company, table)[3:] == ["title", "price", "_ff_m1"], i
    assert sum(RunTables(schema).drop_rules_tmp_for_run(company, r) for r in run_ids) == THREADS
    assert RunTables(schema).list_rules_tmp(company) == []


def test_add_column_from_many_threads_on_one_company_adds_each_column_once(database_url: str) -> None:
    schema = SchemaService()
    company = f"race_{uuid.uuid4().hex[:8]}"
    schema.create_company_schema(company)
    tables = [f"items_{k}" for k in range(3)]
    for t in tables:
        schema.create_project_table(company, t)
    # Every thread adds an overlapping set of columns, to all three tables of the company.
    wanted = {i: [f"f{j}" for j in range(i % 4, i % 4 + 6)] + ["shared", 'we"ird name'] for i in range(THREADS)}

    def add(i: int) -> None:
        for t in tables[i % 3 :] + tables[: i % 3]:
            schema.add_columns(company, t, wanted[i])

    _all_at_once(THREADS, add)
    union = {c for cols in wanted.values() for c in cols}
    for t in tables:
        columns = schema.table_columns(company, t)
        assert len(columns) == len(set(columns))
        assert set(columns[3:]) == union, t


def test_the_janitor_running_alongside_live_runs_drops_only_the_orphans(database_url: str, tmp_path: Path) -> None:
    from firefeed.db.engine import raw_connection
    from firefeed.runs.maintenance import drop_orphan_tmp_tables

    store = RunStore()
    schema = SchemaService()
    company = f"race_{uuid.uuid4().hex[:8]}"
    live, dead = [], []
    for i in range(THREADS):
        project = f"{company}_p{i}"
        spec_path = _spec(tmp_path / project, company, project, items=3)
        store.apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
        run_id = store.request_run(project, "api")
        if i % 2:
            assert store.mark_running(run_id)
            live.append(run_id)
        else:
            store.finish_run(run_id, "FAILED", report=None, error={"step": "RULES", "type": "Crash", "message": "x"})
            dead.append(run_id)
    schema.create_company_schema(company)
    stop = threading.Event()
    dropped: list[str] = []
    errors: list[BaseException] = []
    janitors = [threading.Thread(target=_janitor_loop, args=(stop, dropped, errors)) for _ in range(3)]
    for j in janitors:
        j.start()
    try:
        # Live and dead runs create their pass tables while three janitors sweep.
        _all_at_once(
            THREADS,
            lambda i: [schema.create_rules_tmp(company, (live + dead)[i], p, ["title"]) for p in (1, 2, 3)],
        )
        time.sleep(0.3)
    finally:
        stop.set()
        for j in janitors:
            j.join(timeout=30)
    assert not errors, errors
    dropped.extend(drop_orphan_tmp_tables())
    left = {t for _, t in RunTables(schema).list_rules_tmp(company)}
    assert left == {rules_tmp_table(r, p) for r in live for p in (1, 2, 3)}
    assert {t.split(".", 1)[1] for t in dropped} >= {rules_tmp_table(r, p) for r in dead for p in (1, 2, 3)}
    for run_id in live:
        assert RunTables(schema).drop_rules_tmp_for_run(company, run_id) == 3, "a live run lost a pass table"
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute("UPDATE pipeline_runs SET status = 'FAILED' WHERE id = ANY(%s::uuid[])", (live,))
    assert RunTables(schema).list_rules_tmp(company) == []


def test_the_janitor_does_not_count_a_table_its_run_dropped_after_the_listing(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a run's own cleanup can drop its table between the janitor's listing and its drop."""
    from firefeed.runs.maintenance import drop_orphan_tmp_tables

    store = RunStore()
    schema = SchemaService()
    company = f"race_{uuid.uuid4().hex[:8]}"
    spec_path = _spec(tmp_path, company, f"{company}_p", items=3)
    store.apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    run_id = store.request_run(f"{company}_p", "api")
    store.finish_run(run_id, "SUCCEEDED", report=None, error=None)
    schema.create_company_schema(company)
    gone = schema.create_rules_tmp(company, run_id, 1, ["title"])
    orphan = schema.create_rules_tmp(company, run_id, 2, ["title"])
    listing = RunTables(schema).list_rules_tmp(company)
    schema.drop_table(company, gone)  # the run's own cleanup, after the janitor listed the table
    monkeypatch.setattr(RunTables, "list_rules_tmp", lambda self, company=None: listing)
    assert drop_orphan_tmp_tables() == [f"company_{company}.{orphan}"]
