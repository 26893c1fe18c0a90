"""Refreshes (SPEC 11 I1-I2, #52 part 1): an unchanged refresh reuses the last succeeded run and reports as a
full run of the same inputs would; any change, or `--full`, recomputes; `full` reaches a run from every
entry point."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import Engine

from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli, published_files, write_csv
from tests.integration.test_api import add_project, new_company
from tests.integration.test_processes import insert, make_worker, row, workspace  # noqa: F401

pytestmark = pytest.mark.integration

HEADER = ["id", "title", "price", "brand"]
EXPORT_FIELDS = {"id": "{id}", "title": "{title}", "price": "{price}", "country": "{country}", "label": "{label}"}


def run(spec: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    code, out = cli("run", str(spec), "--json", *flags)
    return code, json.loads(out)


def ok(spec: Path, *flags: str) -> dict[str, Any]:
    code, report = run(spec, *flags)
    assert code == 0, report
    return report


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what may differ between a run and a full run of the same inputs (SPEC 11 I1): its
    id, times and `incremental` part."""
    doc = json.loads(json.dumps(report))
    for key in ("run_id", "requested_at", "started_at", "finished_at", "duration_s", "incremental", "trigger"):
        doc.pop(key, None)
    doc["steps"] = [{k: st[k] for k in ("step", "status", "rows_in", "rows_out")} for st in doc["steps"]]
    for entry in doc["exports"]:
        entry.pop("last_fetch", None)
    return doc


def write_project(tmp: Path, project: str, *, rules: list[dict[str, Any]] | None = None) -> Path:
    spec = {
        "company": "increfresh",
        "project": project,
        "key": "id",
        "sources": [{"name": "main", "url": "main.csv"}, {"name": "stock", "url": "stock.csv", "mode": "enrich"}],
        "lookups": [{"name": "brands", "url": "brands.csv", "key": "brand"}],
        "rules": rules
        if rules is not None
        else [
            {"name": "country", "then": [{"lookup": "brands", "match": "brand", "set": {"country": "country"}}]},
            {
                "name": "cheap",
                "when": {"field": "price", "op": "lt", "value": "10"},
                "then": [{"set": "label", "value": "cheap"}],
            },
        ],
        "exports": [
            {"name": "feed", "path": "feed.csv", "format": "csv", "fields": EXPORT_FIELDS},
            {"name": "json", "path": "feed.json", "format": "json", "fields": EXPORT_FIELDS},
        ],
    }
    path = tmp / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def write_sources(tmp: Path, n: int = 30, *, price_of: int = 0) -> None:
    write_csv(
        tmp / "main.csv", HEADER, [[str(i), f"item {i}", str(i + price_of), f"b{i % 3}"] for i in range(1, n + 1)]
    )
    write_csv(tmp / "stock.csv", ["id", "stock"], [[str(i), str(i % 5)] for i in range(1, n + 1)])
    write_csv(tmp / "brands.csv", ["brand", "country"], [["b0", "FR"], ["b1", "DE"]])


def files(exports: Path, project: str) -> dict[str, bytes]:
    return published_files(exports / "increfresh" / project)


def test_an_unchanged_refresh_reuses_the_last_run_and_reports_what_a_full_run_reports(
    run_env: Path, tmp_path: Path
) -> None:
    project = f"inc{uuid.uuid4().hex[:8]}"
    write_sources(tmp_path)
    spec = write_project(tmp_path, project)
    first = ok(spec)
    assert first["incremental"]["mode"] == "full"
    assert first["incremental"]["reason"].startswith("first run")
    published = files(run_env, project)
    stamps = {name: os.stat(run_env / "increfresh" / project / name).st_mtime_ns for name in published}

    refreshed = ok(spec)
    assert refreshed["incremental"] == {
        "mode": "unchanged",
        "reason": f"no source, lookup table or the spec changed since run {first['run_id']}",
        "items_added": 0,
        "items_changed": 0,
        "items_removed": 0,
        "items_recomputed": 0,
        "reused_from": first["run_id"],
    }
    # Nothing written: the same files, untouched, their sha256 repeated.
    assert files(run_env, project) == published
    assert {n: os.stat(run_env / "increfresh" / project / n).st_mtime_ns for n in published} == stamps
    assert [e["sha256"] for e in refreshed["exports"]] == [e["sha256"] for e in first["exports"]]
    # Every item unchanged, as the diff of a full run of the same inputs says.
    for entry in refreshed["exports"]:
        assert entry["diff"]["unchanged"] == entry["diff"]["rows"] == 30
        assert (entry["diff"]["added"], entry["diff"]["changed"], entry["diff"]["removed"]) == (0, 0, 0)

    full = ok(spec, "--full")
    assert full["incremental"]["mode"] == "full" and full["incremental"]["reason"] == "--full asked"
    assert full["incremental"]["items_recomputed"] == 30
    assert comparable(refreshed) == comparable(full)
    assert files(run_env, project) == published

    # A run reused twice names the run that computed it; values read that run's kept result.
    again = ok(spec)
    assert again["incremental"]["mode"] == "unchanged" and again["incremental"]["reused_from"] == full["run_id"]
    code, out = cli("values", project, "label", "--json")
    assert code == 0, out
    values = json.loads(out)
    assert values["run_id"] == again["run_id"]
    assert {v["value"]: v["count"] for v in values["values"]} == {"cheap": 9, "": 21}


def test_a_change_of_source_lookup_spec_or_published_file_recomputes_and_says_why(
    run_env: Path, tmp_path: Path
) -> None:
    project = f"inc{uuid.uuid4().hex[:8]}"
    write_sources(tmp_path)
    spec = write_project(tmp_path, project)
    ok(spec)

    def reason() -> str:
        report = ok(spec)
        assert report["incremental"]["mode"] == "full", report["incremental"]
        assert ok(spec)["incremental"]["mode"] == "unchanged"  # and the next refresh reuses it
        return str(report["incremental"]["reason"])

    write_csv(tmp_path / "stock.csv", ["id", "stock"], [[str(i), "9"] for i in range(1, 31)])
    assert reason() == "source 'stock' changed; not a delta: rule 'country' uses a lookup"
    write_csv(tmp_path / "brands.csv", ["brand", "country"], [["b0", "FR"], ["b1", "IT"]])
    assert reason() == "lookup 'brands' changed"
    write_project(tmp_path, project, rules=[{"name": "all", "then": [{"set": "label", "value": "x"}]}])
    assert reason() == "spec changed"
    (run_env / "increfresh" / project / "feed.csv").write_text("tampered\n", encoding="utf-8")
    assert reason() == "export 'feed': its published file is gone or changed"
    (run_env / "increfresh" / project / "feed.json").unlink()
    assert reason() == "export 'json': its published file is gone or changed"
    assert json.loads((run_env / "increfresh" / project / "feed.json").read_text(encoding="utf-8"))

    # A run that fails after MERGE rebuilt the project's tables: the next one recomputes even with the
    # last succeeded run's sources and spec back.
    excluding = [{"name": "most", "when": {"field": "id", "op": "ne", "value": "1"}, "then": [{"exclude": True}]}]
    write_project(tmp_path, project, rules=excluding)  # 29 of 30 items gone: the drop guard blocks
    code, blocked = run(spec)
    assert code != 0 and blocked["status"] == "FAILED", blocked
    write_project(tmp_path, project, rules=[{"name": "all", "then": [{"set": "label", "value": "x"}]}])
    expected = f"run {blocked['run_id']} rebuilt the project's tables since the last succeeded run"
    assert reason() == expected


def test_full_reaches_a_run_from_the_api_body_the_trigger_task_and_a_processes_row(
    http: httpx.Client,
    engine: Engine,
    run_env: Path,
    workspace: str,  # noqa: F811
    make_worker,  # noqa: F811
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    from firefeed.tasks.pipeline import trigger

    company, auth = new_company()
    project = add_project(company, tmp_path)
    store = RunStore()
    for body, expected in (({"full": True}, True), ({"accept_drop": True}, False), (None, False)):
        answer = http.post(f"/api/projects/{project}/pipeline/run", headers=auth, json=body)
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        assert store.run(run_id).full is expected
        http.post(f"/api/runs/{run_id}/cancel", headers=auth)
    refused = http.post(f"/api/projects/{project}/pipeline/run-now", headers=auth, json={"full": "perhaps"})
    assert refused.status_code == 422, refused.text
    for kwargs, expected in (({"full": True}, True), ({}, False)):
        answer = trigger(project, **kwargs)
        assert answer["status"] == "accepted"
        assert store.run(answer["run_id"]).full is expected
        store.request_cancel(answer["run_id"])

    other = f"p{uuid.uuid4().hex[:8]}"
    spec = {
        "company": workspace,
        "project": other,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "feed", "format": "csv", "path": "f.csv", "fields": {"id": "{id}"}}],
    }
    RunStore(engine).apply_spec(parse_spec(spec), spec_dir=tmp_path)
    write_csv(tmp_path / "main.csv", ["id"], [[str(n)] for n in range(5)])
    modes = []
    for input_data in ({"project": other}, {"project": other}, {"project": other, "full": True}):
        pid = insert(engine, "firefeed.pipeline.run", input_data, workspace=workspace)
        make_worker().drain()
        outcome = row(engine, pid)
        assert outcome["status"] == "completed", outcome
        modes.append(outcome["output_data"]["incremental"]["mode"])
    assert modes == ["full", "unchanged", "full"]


def test_the_metrics_count_runs_by_refresh_mode_and_the_readable_report_names_it(run_env: Path, tmp_path: Path) -> None:
    from firefeed import metrics

    def count(mode: str) -> float:
        text = metrics.render(fleet=False)[0].decode()
        return sum(
            v
            for name, labels, v in metrics.iter_samples(text)
            if name == "firefeed_runs_by_refresh_mode_total" and labels.get("mode") == mode
        )

    before = {m: count(m) for m in ("full", "unchanged")}
    write_sources(tmp_path)
    spec = write_project(tmp_path, f"inc{uuid.uuid4().hex[:8]}")
    ok(spec)
    ok(spec)
    assert {m: count(m) - before[m] for m in before} == {"full": 1, "unchanged": 1}
    code, out = cli("run", str(spec))  # the readable report says it too
    assert code == 0, out
    assert "refresh: unchanged (no source, lookup table or the spec changed since run " in out


def named(report: dict[str, Any], project: str) -> dict[str, Any]:
    """`comparable` of a report of `project`, its name and feed URLs left out (two projects' runs compared)."""
    doc = comparable(json.loads(json.dumps(report).replace(project, "<project>")))
    for entry in doc["exports"]:
        entry.pop("url", None)
    return doc


def test_a_change_of_the_stock_source_alone_recomputes_only_its_items_as_a_full_run_would(
    run_env: Path, tmp_path: Path
) -> None:
    """SPEC 11 I1 for a delta (#52 part 2): an enrich source changed, the items it changed merged and
    ruled again, the files, counts and diffs those of a full run and of a fresh project."""
    per_item = [
        {
            "name": "cheap",
            "when": {"field": "price", "op": "lt", "value": "10"},
            "then": [{"set": "label", "value": "cheap"}],
        },
        {"name": "low", "when": {"field": "stock", "op": "eq", "value": "0"}, "then": [{"exclude": True}]},
        {
            "name": "high",
            "when": {"field": "stock", "op": "eq", "value": "4"},
            "then": [{"set": "country", "value": "XX"}],
        },
    ]
    refreshed, full, fresh = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(3))
    write_sources(tmp_path)
    specs = {p: write_project(tmp_path, p, rules=per_item) for p in (refreshed, full, fresh)}
    first = ok(specs[refreshed])
    ok(specs[full])

    # Every 3rd item's stock changes (to 0: excluded, to 4: labelled, or other), one new stock row matches no item.
    rows = [[str(i), str((i + 1) % 5) if i % 3 == 0 else str(i % 5)] for i in range(1, 31)] + [["99", "4"]]
    write_csv(tmp_path / "stock.csv", ["id", "stock"], rows)
    delta = ok(specs[refreshed])
    assert delta["incremental"] == {
        "mode": "delta",
        "reason": f"only the enrich source(s) 'stock' changed since run {first['run_id']}",
        "items_added": 0,
        "items_changed": 10,
        "items_removed": 0,
        "items_recomputed": 10,
    }
    assert merge_detail(delta["run_id"])["changed_by"] == "items rows"
    assert named(delta, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)
    ok(specs[fresh])
    assert files(run_env, refreshed) == files(run_env, fresh)
    code, out = cli("values", refreshed, "label", "--json")
    assert code == 0, out
    assert json.loads(out)["run_id"] == delta["run_id"]

    # A delta run builds on a delta run, and an unchanged one on it.
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [[str(i), str(i % 4)] for i in range(1, 31)])
    again = ok(specs[refreshed])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert named(again, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)
    assert ok(specs[refreshed])["incremental"]["mode"] == "unchanged"


def _stock_delta_ready(tmp: Path) -> tuple[Path, Path]:
    """A project with a run behind it and its fresh twin, the stock changed since (a delta next)."""
    refreshed, fresh = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(2))
    write_sources(tmp)
    specs = [write_project(tmp, p, rules=PER_ITEM_RULES) for p in (refreshed, fresh)]
    ok(specs[0])
    write_csv(tmp / "stock.csv", ["id", "stock"], [[str(i), str((i + 1) % 5)] for i in range(1, 31)])
    return specs[0], specs[1]


def test_a_delta_whose_items_update_fails_fails_before_publishing_and_the_next_run_is_a_full_runs(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The changed items' UPDATE of the items table runs beside RULES and EXPORT (delta.ItemsUpdate): its failure
    fails the run before the publish, the published files stay the last run's, and the next run gives a full
    run's."""
    from firefeed.pipeline import delta

    refreshed, fresh = _stock_delta_ready(tmp_path)
    before = files(run_env, refreshed.stem)

    def failing(engine: Any, statement: Any) -> int:
        time.sleep(0.2)  # RULES runs meanwhile
        raise RuntimeError("the items table could not be updated")

    with monkeypatch.context() as m:
        m.setattr(delta.ItemsUpdate, "_run", staticmethod(failing))
        code, report = run(refreshed)
    assert code != 0 and report["status"] == "FAILED", report
    assert report["error"]["step"] == "EXPORT" and "could not be updated" in report["error"]["message"]
    assert files(run_env, refreshed.stem) == before
    ok(refreshed)
    ok(fresh)
    assert files(run_env, refreshed.stem) == files(run_env, fresh.stem)


@pytest.mark.parametrize("step", ["RULES", "EXPORT"])
def test_a_delta_failing_beside_the_items_update_waits_for_it_before_it_ends(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The UPDATE goes on beside RULES and EXPORT: a step failing meanwhile ends the run only once it is done
    (the project is not free while it writes), with nothing published."""
    from firefeed.pipeline import delta, delta_rules, steps

    refreshed, fresh = _stock_delta_ready(tmp_path)
    before = files(run_env, refreshed.stem)
    updated: list[int] = []
    original = delta.ItemsUpdate._run

    def slow(engine: Any, statement: Any) -> int:
        time.sleep(1.0)  # longer than the step takes to fail
        updated.append(original(engine, statement))
        return updated[-1]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{step} broke")

    with monkeypatch.context() as m:
        m.setattr(delta.ItemsUpdate, "_run", staticmethod(slow))
        if step == "RULES":
            m.setattr(delta_rules, "rules_delta", broken)
        else:
            m.setattr(steps, "export_one", broken)
        code, report = run(refreshed)
    assert code != 0 and f"{step} broke" in report["error"]["message"], report
    assert report["error"]["step"] == step, report["error"]
    assert updated == [30]  # every item changed, done before the run ended
    assert files(run_env, refreshed.stem) == before
    ok(refreshed)
    ok(fresh)
    assert files(run_env, refreshed.stem) == files(run_env, fresh.stem)


def merge_detail(run_id: str) -> dict[str, Any]:
    from firefeed.runs.contract import Step

    return next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.MERGE)


PER_ITEM_RULES = [
    {"name": "low", "when": {"field": "stock", "op": "eq", "value": "0"}, "then": [{"exclude": True}]},
    {"name": "high", "when": {"field": "stock", "op": "eq", "value": "4"}, "then": [{"set": "country", "value": "XX"}]},
    {"name": "none", "when": {"field": "stock", "op": "eq", "value": ""}, "then": [{"set": "label", "value": "?"}]},
]


def test_a_delta_finds_the_items_an_enrich_source_changed_gained_or_lost_from_its_kept_staged_rows(
    run_env: Path, tmp_path: Path
) -> None:
    """The delta's MERGE compares the stock source's kept staged rows with its new ones (#52): a key it lost
    (the item's stock falls back to empty), a key it gained (a join miss becomes a hit), a value changed,
    a repeated key (its first row counts) and an empty one; the result a full run's and a fresh project's."""
    refreshed, full, fresh = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(3))
    write_sources(tmp_path)
    # Items 5 and 6 have no stock row at first.
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [[str(i), str(i % 5)] for i in range(1, 31) if i not in (5, 6)])
    specs = {p: write_project(tmp_path, p, rules=PER_ITEM_RULES) for p in (refreshed, full, fresh)}
    first = ok(specs[refreshed])
    ok(specs[full])

    # Lost: 1 (was 1), 4 (was 4), 9 (was 4); gained: 5 (0), 6 (3); changed: 12 (2 -> 0); 13 repeated (its first
    # row keeps 3, the second would say 0); an empty key; 7 (2) written again unchanged; a key no item has.
    rows = [[str(i), str(i % 5)] for i in range(1, 31) if i not in (1, 4, 9, 12, 13)]
    rows += [["5", "0"], ["6", "3"], ["12", "0"], [" 13", "3"], ["13", "0"], ["", "1"], ["7", "2"], ["99", "4"]]
    write_csv(tmp_path / "stock.csv", ["id", "stock"], rows)
    delta = ok(specs[refreshed])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "items rows"
    assert delta["incremental"]["items_changed"] == 6, delta["incremental"]  # 1, 4, 5, 6, 9, 12
    expected = ok(specs[full], "--full")
    assert named(delta, refreshed) == named(expected, full)
    assert delta["sources"] == expected["sources"]  # the repeated and empty keys counted as a full run does
    assert files(run_env, refreshed) == files(run_env, full)
    ok(specs[fresh])
    assert files(run_env, refreshed) == files(run_env, fresh)
    assert first["run_id"] != delta["run_id"]

    # And back: a delta on that delta compares with the rows it staged (the unclean ones kept).
    write_sources(tmp_path)
    again = ok(specs[refreshed])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert merge_detail(again["run_id"])["changed_by"] == "items rows"
    assert named(again, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)


@pytest.mark.parametrize("loss", ["dropped", "emptied"])
def test_a_delta_whose_kept_staged_rows_are_gone_merges_every_item_again(
    run_env: Path, tmp_path: Path, engine: Engine, loss: str
) -> None:
    """When the stock source's staged rows the last run merged cannot be had (the table dropped, or emptied
    as crash recovery empties an UNLOGGED table), the delta compares every merged row instead: the same
    result, found the slow way."""
    from sqlalchemy import text

    from firefeed.schema.identifiers import company_schema, staging_table

    refreshed, full = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(2))
    write_sources(tmp_path)
    specs = {p: write_project(tmp_path, p, rules=PER_ITEM_RULES) for p in (refreshed, full)}
    ok(specs[refreshed])
    ok(specs[full])
    table = f'"{company_schema("increfresh")}"."{staging_table(refreshed, "stock")}"'
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE {table}" if loss == "dropped" else f"TRUNCATE {table}"))
    # Item 3 loses its stock row, item 8's changes.
    rows = [[str(i), "0" if i == 8 else str(i % 5)] for i in range(1, 31) if i != 3]
    write_csv(tmp_path / "stock.csv", ["id", "stock"], rows)
    delta = ok(specs[refreshed])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "merged rows"
    assert delta["incremental"]["items_changed"] == 2, delta["incremental"]
    assert named(delta, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)


def test_a_delta_of_a_project_with_an_append_source_merges_the_changed_keys_as_a_full_run(
    run_env: Path, tmp_path: Path
) -> None:
    """An append source adds items after the primary's: a stock change reaching both kinds of item is merged
    from the kept staged rows as a full run merges it (an appended item is enriched only by the sources
    after its own)."""
    refreshed, full = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(2))
    write_sources(tmp_path, n=20)
    write_csv(tmp_path / "extra.csv", HEADER, [[str(i), f"extra {i}", str(i), "b1"] for i in range(15, 31)])
    specs = {}
    for project in (refreshed, full):
        path = write_project(tmp_path, project, rules=PER_ITEM_RULES)
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["sources"].insert(1, {"name": "extra", "url": "extra.csv", "mode": "append"})
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        specs[project] = path
    ok(specs[refreshed])
    ok(specs[full])
    # Stock changed for primary items (2, 7) and an item both have (17), gained by the appended ones (21-30:
    # the first stock had rows for 1-20 only), lost by 3.
    rows = [[str(i), "0" if i in (2, 7, 17, 25) else "4" if i == 26 else str(i % 5)] for i in range(1, 31) if i != 3]
    write_csv(tmp_path / "stock.csv", ["id", "stock"], rows)
    delta = ok(specs[refreshed])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "staged rows"
    assert delta["incremental"]["items_changed"] == 14, delta["incremental"]  # 2, 3, 7, 17, 21-30
    assert named(delta, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)


def test_a_delta_after_a_failed_parse_of_the_source_compares_the_rows_the_last_success_merged(
    run_env: Path, tmp_path: Path
) -> None:
    """A run whose parse of the stock source failed left the rows the last succeeded run merged kept: the
    next delta compares the new rows with those, not with the broken parse's."""
    refreshed, full = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(2))
    write_sources(tmp_path)
    specs = {p: write_project(tmp_path, p, rules=PER_ITEM_RULES) for p in (refreshed, full)}
    ok(specs[refreshed])
    ok(specs[full])
    # More fields than Postgres allows columns: the parse fails, and the run with it.
    write_csv(tmp_path / "stock.csv", ["id", *[f"f{i}" for i in range(1700)]], [["1", *["x"] * 1700]])
    code, failed = run(specs[refreshed])
    assert code != 0 and failed["status"] == "FAILED", failed
    rows = [[str(i), "0" if i == 8 else str(i % 5)] for i in range(1, 31) if i != 3]
    write_csv(tmp_path / "stock.csv", ["id", "stock"], rows)
    delta = ok(specs[refreshed])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert merge_detail(delta["run_id"])["changed_by"] == "items rows"
    assert delta["incremental"]["items_changed"] == 2, delta["incremental"]
    assert named(delta, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)


def test_a_delta_whose_changed_source_is_back_to_the_rows_the_last_success_merged_changes_no_item(
    run_env: Path, tmp_path: Path
) -> None:
    """The stock file as the last succeeded run read it comes back after a run whose parse of it failed:
    parsed again, it is the source that run merged, so no item changes (the result a full run's)."""
    refreshed, full = (f"inc{uuid.uuid4().hex[:8]}" for _ in range(2))
    write_sources(tmp_path)
    specs = {p: write_project(tmp_path, p, rules=PER_ITEM_RULES) for p in (refreshed, full)}
    ok(specs[refreshed])
    ok(specs[full])
    stock = tmp_path / "stock.csv"
    merged, when = stock.read_bytes(), stock.stat()
    write_csv(stock, ["id", *[f"f{i}" for i in range(1700)]], [["1", *["x"] * 1700]])
    for project in (refreshed, full):
        code, failed = run(specs[project])
        assert code != 0 and failed["status"] == "FAILED", failed
    stock.write_bytes(merged)  # restored as it was (a backup's copy keeps its times)
    os.utime(stock, ns=(when.st_atime_ns, when.st_mtime_ns))

    back = ok(specs[refreshed])

    assert back["incremental"]["mode"] in ("delta", "unchanged"), back["incremental"]
    assert back["incremental"].get("items_changed", 0) == 0, back["incremental"]
    assert named(back, refreshed) == named(ok(specs[full], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)
