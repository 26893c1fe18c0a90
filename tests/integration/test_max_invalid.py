"""SPEC 10 C3 (#49): max_invalid keeps a feed the channel would reject from replacing the live one.

Out of the box (5%) an export whose items the channel rejects is not published: the run fails in
EXPORT with ChannelRejectError naming the export, the share and the top findings, and the previous
files stay byte for byte. `fail_on: error` is 0%. A person overrides it from every entry point (the
CLI's --accept-invalid, the API body, the trigger task, a processes row). Under the threshold the
bad items are written unless `invalid_items: exclude`, which leaves them out and counts them.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import Engine

from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli, run_json, write_csv
from tests.integration.test_api import add_project, new_company
from tests.integration.test_processes import insert, make_worker, row, workspace  # noqa: F401

pytestmark = pytest.mark.integration

HEADER = ["id", "title", "description", "link", "image_link", "price", "availability", "gtin"]
GOOD_GTIN = "4006381333931"


def _item(n: int, *, bad: bool = False) -> list[str]:
    """A Google-ready item; `bad`: its price is 0 (a `price_value` error) and its GTIN's check digit is wrong."""
    price = "0.00 EUR" if bad else f"{n + 1}.50 EUR"
    gtin = "4006381333932" if bad else GOOD_GTIN
    return [
        f"K{n}",
        f"Item {n}",
        f"Item {n}, described",
        f"https://shop.example.com/p/{n}",
        f"https://cdn.shop.example.com/{n}.jpg",
        price,
        "in stock",
        gtin,
    ]


def _spec(tmp: Path, project: str, bad: set[int], total: int, **export: Any) -> Path:
    write_csv(tmp / "main.csv", HEADER, [_item(n, bad=n in bad) for n in range(total)])
    spec = {
        "company": "c3",
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [
            {"name": "google", "format": "google-xml", "path": "g.xml", "fields": {"id": "id", **_FIELDS}, **export},
            {"name": "plain", "format": "csv", "path": "p.csv"},
        ],
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


_FIELDS = {
    "title": "title",
    "description": "description",
    "link": "link",
    "image_link": "image_link",
    "price": "price",
    "availability": "availability",
    "gtin": "gtin",
    "condition": {"value": "new"},
}


def _google(report: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in report["exports"] if e["name"] == "google")


def test_out_of_the_box_an_export_over_5_percent_invalid_is_blocked_and_the_previous_files_stay(
    run_env: Path, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "blocked", set(), 20)
    code, first = run_json(spec)
    assert code == 0, first["error"]
    assert _google(first)["diagnostics"]["max_invalid"] == {"share": 0.0, "max_invalid": 5.0, "status": "ok"}
    folder = run_env / "c3" / "blocked"
    before = {name: (folder / name).read_bytes() for name in ("g.xml", "p.csv")}

    _spec(tmp_path, "blocked", {3, 7}, 20)  # 2 of 20: 10% > 5%
    code, report = run_json(spec)
    assert code == 1
    error = report["error"]
    assert (error["step"], error["type"]) == ("EXPORT", "ChannelRejectError")
    assert error["message"].startswith(
        "export 'google': 2 of 20 items (10%) have errors google rejects, more than max_invalid 5% ("
    )
    assert "2 item(s) gtin: not a GTIN with a valid check digit (e.g. K3, K7)" in error["message"]
    assert "2 item(s) price: 0 or negative (e.g. K3, K7)" in error["message"]
    assert error["message"].endswith("re-run with --accept-invalid to publish anyway")
    diagnostics = _google(report)["diagnostics"]
    assert (diagnostics["items"], diagnostics["invalid"]) == (20, 2)
    assert diagnostics["max_invalid"] == {"share": 10.0, "max_invalid": 5.0, "status": "blocked"}
    assert {name: (folder / name).read_bytes() for name in ("g.xml", "p.csv")} == before

    code, out = cli("run", str(spec), "--accept-invalid")
    assert code == 0, out
    assert b"K3" in (folder / "g.xml").read_bytes()  # written: the channel disapproves it alone
    code, accepted = run_json(spec)  # the next run without the flag is blocked again: nothing was remembered
    assert code == 1 and accepted["error"]["type"] == "ChannelRejectError"


def test_under_the_threshold_bad_items_are_written_and_exclude_leaves_them_out_and_counts_them(
    run_env: Path, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "under", {4}, 40)  # 2.5%
    code, report = run_json(spec)
    assert code == 0, report["error"]
    google = _google(report)
    assert google["diagnostics"]["max_invalid"]["status"] == "ok"
    assert "excluded" not in google["diagnostics"]
    assert google["rows"] == 40
    assert b"<g:id>K4</g:id>" in (run_env / "c3" / "under" / "g.xml").read_bytes()

    spec = _spec(
        tmp_path,
        "excluded",
        {4, 9},
        60,
        invalid_items="exclude",
        where={"field": "title", "op": "ne", "value": "Item 1"},
    )
    code, report = run_json(spec)
    assert code == 0, report["error"]
    google = _google(report)
    assert google["diagnostics"]["excluded"] == 2
    assert google["rows"] == 57  # 59 items the where selects (3.4% invalid), 2 left out
    written = (run_env / "c3" / "excluded" / "g.xml").read_bytes()
    assert b"<g:id>K4</g:id>" not in written and b"<g:id>K9</g:id>" not in written
    assert written.count(b"<item>") == 57 and b"<g:id>K1</g:id>" not in written
    plain = (run_env / "c3" / "excluded" / "p.csv").read_text(encoding="utf-8")
    assert plain.count("\n") == 61  # an export without a channel is not filtered


def test_fail_on_error_is_max_invalid_0_and_a_looser_max_invalid_publishes(run_env: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "strict", {5}, 100, fail_on="error")  # 1%: under 5%, over 0%
    code, report = run_json(spec)
    assert code == 1
    assert report["error"]["type"] == "ChannelRejectError"
    assert (
        "1 of 100 items (1%) have errors google rejects, more than fail_on: error allows none"
        in (report["error"]["message"])
    )
    assert _google(report)["diagnostics"]["max_invalid"]["max_invalid"] == 0.0

    spec = _spec(tmp_path, "loose", set(range(30)), 100, max_invalid="30%")
    code, report = run_json(spec)
    assert code == 0, report["error"]
    assert _google(report)["diagnostics"]["max_invalid"] == {"share": 30.0, "max_invalid": 30.0, "status": "ok"}


def test_a_later_duplicate_id_is_an_invalid_item(run_env: Path, tmp_path: Path) -> None:
    rows = [_item(n) for n in range(10)]
    rows[6][0] = rows[2][0] = "K2"  # the key is the sku: the id of two items is one
    write_csv(tmp_path / "main.csv", [*HEADER, "sku"], [[*r, f"S{n}"] for n, r in enumerate(rows)])
    spec = {
        "company": "c3",
        "project": "dups",
        "key": "sku",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [
            {"name": "google", "format": "google-xml", "path": "g.xml", "fields": {"id": "id", **_FIELDS}},
        ],
    }
    path = tmp_path / "dups.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 1
    assert "1 of 10 items (10%) have errors" in report["error"]["message"]
    assert "1 item(s) id: the same id as an earlier item (e.g. K2)" in report["error"]["message"]


def test_accept_invalid_reaches_a_run_from_the_api_body_and_the_trigger_task(
    http: httpx.Client, tmp_path: Path
) -> None:
    from firefeed.tasks.pipeline import trigger

    company, auth = new_company()
    project = add_project(company, tmp_path)
    store = RunStore()
    for body, expected in (({"accept_invalid": True}, True), ({"accept_drop": True}, False), (None, False)):
        answer = http.post(f"/api/projects/{project}/pipeline/run", headers=auth, json=body)
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        assert store.run(run_id).accept_invalid is expected
        http.post(f"/api/runs/{run_id}/cancel", headers=auth)
    refused = http.post(f"/api/projects/{project}/pipeline/run-now", headers=auth, json={"accept_invalid": "perhaps"})
    assert refused.status_code == 422, refused.text
    for kwargs, expected in (({"accept_invalid": True}, True), ({}, False)):
        answer = trigger(project, **kwargs)
        assert answer["status"] == "accepted"
        assert store.run(answer["run_id"]).accept_invalid is expected
        store.request_cancel(answer["run_id"])


def test_a_processes_row_may_accept_invalid_items(
    engine: Engine,
    run_env: Path,
    workspace: str,  # noqa: F811
    make_worker,  # noqa: F811
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    project = f"p{uuid.uuid4().hex[:8]}"
    spec = {
        "company": workspace,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "google", "format": "google-xml", "path": "g.xml", "fields": {"id": "id", **_FIELDS}}],
    }
    RunStore(engine).apply_spec(parse_spec(spec), spec_dir=tmp_path)
    write_csv(tmp_path / "main.csv", HEADER, [_item(n, bad=n < 3) for n in range(10)])
    outcomes = []
    for input_data in ({"project": project}, {"project": project, "accept_invalid": True}):
        pid = insert(engine, "firefeed.pipeline.run", input_data, workspace=workspace)
        make_worker().drain()
        outcomes.append(row(engine, pid))
    assert [r["status"] for r in outcomes] == ["failed", "completed"]
    assert outcomes[0]["output_data"]["error"]["type"] == "ChannelRejectError"
    assert "3 of 10 items (30%) have errors google rejects" in outcomes[0]["error_message"]
    export = outcomes[1]["output_data"]["exports"][0]
    assert export["diagnostics"]["max_invalid"] == {"share": 30.0, "max_invalid": 5.0, "status": "accepted"}


def test_through_the_queues_max_invalid_blocks_and_accept_invalid_publishes(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firefeed.config import reset_settings
    from firefeed.runs.requests import start_run
    from firefeed.spec.loader import load_spec_file
    from tests.integration.celery_workers import in_process_worker, use_broker
    from tests.integration.test_distributed import wait_finished

    exports_dir = tmp_path / "exports"
    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(exports_dir))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "var"))
    reset_settings()
    spec = _spec(tmp_path, "c3_dist", {1, 2}, 10)
    RunStore().apply_spec(load_spec_file(spec), spec_dir=tmp_path)
    use_broker("memory://")
    try:
        with in_process_worker():
            blocked = wait_finished(start_run("c3_dist", "api"))
            written = (exports_dir / "c3" / "c3_dist").exists() and any((exports_dir / "c3" / "c3_dist").iterdir())
            accepted = wait_finished(start_run("c3_dist", "api", accept_invalid=True))
    finally:
        reset_settings()
    assert blocked["status"] == "FAILED" and blocked["error"]["type"] == "ChannelRejectError"
    assert not written
    assert accepted["status"] == "SUCCEEDED", accepted["error"]
    assert _google(accepted)["diagnostics"]["max_invalid"]["status"] == "accepted"
