"""Specs keep their mapping order in every store they pass through (SPEC 8.18), refuse NUL (8.24),
and the answers about them give nothing away: export paths relative to the export folder (SPEC 5),
another company's project answered like a missing one.

Each export of the spec lists `fields` in an order JSONB would change (JSONB sorts object keys by
length, then bytes: `ID, nome, tipo, pai, preco` -> `ID, pai, nome, tipo, preco`).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import Engine

from firefeed.config import reset_settings
from firefeed.pipeline.run import execute_run
from firefeed.rules.model import MapValues
from firefeed.runs.report import build_report
from firefeed.runs.service import RunStore
from tests.integration.celery_workers import in_process_worker, use_broker
from tests.integration.conftest import cli, new_company, run_json, write_csv
from tests.integration.test_processes import insert, make_worker, row, workspace  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

FIELDS = {"ID": "id", "nome": "title", "tipo": "brand", "pai": "color", "preco": "{price} EUR"}
assert sorted(FIELDS, key=lambda k: (len(k), k)) != list(FIELDS)  # JSONB's order differs from the spec's
FIRST_ITEM = {"ID": "A1", "nome": "Scarpa", "tipo": "Acme", "pai": "green", "preco": "10 EUR"}
FORMATS = {"csv": "out.csv", "tsv": "out.tsv", "json": "out.json", "jsonl": "out.jsonl", "google-xml": "google.xml"}
MAP_VALUES = {"verde": "green", "blu": "blue", "rosso": "red"}
HEADERS = {"X-Longer-Name": "1", "X-B": "2", "X-Mid": "3"}


def spec_doc(company: str, project: str, url: str = "main.csv") -> dict[str, Any]:
    """A fresh document each time: tests edit it."""
    doc = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": url, "headers": HEADERS}],
        "rules": [{"name": "colors", "then": [{"map": "color", "values": MAP_VALUES}]}],
        # C3: these items are not Google-complete; the tests read the order of the columns.
        "exports": [
            {"name": fmt.replace("-", "_"), "format": fmt, "path": path, "fields": FIELDS}
            | ({"max_invalid": "100%"} if fmt == "google-xml" else {})
            for fmt, path in FORMATS.items()
        ],
    }
    return copy.deepcopy(doc)


def write_feed(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "brand", "color", "price"],
        [["A1", "Scarpa", "Acme", "verde", "10"], ["A2", "Stivale", "Acme", "blu", "20"]],
    )


def write_spec(folder: Path, company: str, project: str) -> Path:
    write_feed(folder)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_doc(company, project), sort_keys=False), encoding="utf-8")
    return path


def columns_of(fmt: str, data: str) -> tuple[list[str], dict[str, str]]:
    """The export's column names in file order, and its first item."""
    if fmt in ("csv", "tsv"):
        rows = list(csv.reader(io.StringIO(data), delimiter="," if fmt == "csv" else "\t"))
        return rows[0], dict(zip(rows[0], rows[1], strict=True))
    if fmt == "json":
        first = json.loads(data)[0]
        return list(first), first
    if fmt == "jsonl":
        first = json.loads(data.splitlines()[0])
        return list(first), first
    item = ET.fromstring(data).find("channel/item")
    assert item is not None
    first = {child.tag.rsplit("}", 1)[-1]: child.text or "" for child in item}
    return list(first), first


def assert_columns_in_spec_order(report: dict[str, Any], export_dir: Path, company: str, project: str) -> None:
    assert report["status"] == "SUCCEEDED", report["error"]
    by_format = {e["name"]: e for e in report["exports"]}
    for fmt, rel in FORMATS.items():
        entry = by_format[fmt.replace("-", "_")]
        # SPEC 5: the path is relative to the export folder, never a server path.
        assert entry["path"] == f"{company}/{project}/{rel}", entry
        names, first = columns_of(fmt, (export_dir / entry["path"]).read_text(encoding="utf-8"))
        assert names == list(FIELDS), fmt
        assert first == FIRST_ITEM, fmt


def assert_spec_keeps_its_order(store: RunStore, run_id: str) -> None:
    """The run's snapshot, read back from the database, keeps the order of every mapping of the spec."""
    spec, _ = store.run_spec(run_id)
    assert all(list(e.fields or {}) == list(FIELDS) for e in spec.exports)
    assert list(spec.sources[0].headers) == list(HEADERS)
    (action,) = spec.parsed_rules[0].then
    assert isinstance(action, MapValues)
    assert [k for k, _ in action.values] == list(MAP_VALUES)
    stored = store.project(spec.project).spec
    assert list(stored["rules"][0]["then"][0]["values"]) == list(MAP_VALUES)


# -- (a) firefeed run ------------------------------------------------------------------------------
def test_firefeed_run_writes_every_formats_columns_in_the_order_fields_lists_them(
    run_env: Path, tmp_path: Path
) -> None:
    project = "order_run_" + uuid.uuid4().hex[:6]
    code, report = run_json(write_spec(tmp_path, "acme", project))
    assert code == 0, report["error"]
    assert_columns_in_spec_order(report, run_env, "acme", project)
    assert_spec_keeps_its_order(RunStore(), report["run_id"])


def test_the_cli_table_shows_export_paths_relative_to_the_export_folder(run_env: Path, tmp_path: Path) -> None:
    project = "order_tab_" + uuid.uuid4().hex[:6]
    code, out = cli("run", str(write_spec(tmp_path, "acme", project)))
    assert code == 0, out
    assert f"  acme/{project}/out.csv" in out
    assert str(run_env) not in out


# -- (b) apply + trigger (the queues) --------------------------------------------------------------
@pytest.fixture()
def memory_worker(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A broker is configured (Celery's in-memory one, served by the worker in this process): trigger takes it.
    monkeypatch.setenv("FIREFEED_BROKER_URL", "memory://")
    reset_settings()
    use_broker("memory://")
    with in_process_worker():
        yield
    reset_settings()


def wait_finished(run_id: str, timeout: float = 60) -> dict[str, Any]:
    store = RunStore()
    deadline = time.monotonic() + timeout
    while store.run(run_id).status in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, f"run {run_id} did not finish in {timeout}s"
        time.sleep(0.05)
    return build_report(store, run_id)


def test_apply_then_trigger_writes_the_columns_in_the_spec_order(
    run_env: Path, memory_worker: None, tmp_path: Path
) -> None:
    project = "order_trg_" + uuid.uuid4().hex[:6]
    assert cli("apply", str(write_spec(tmp_path, "acme", project)))[0] == 0
    code, out = cli("trigger", project)
    assert code == 0, out
    run_id = out.strip()
    report = wait_finished(run_id)
    assert_columns_in_spec_order(report, run_env, "acme", project)
    assert_spec_keeps_its_order(RunStore(), run_id)
    code, status = cli("status", run_id, "--json")
    assert code == 0 and json.loads(status)["exports"] == report["exports"]


# -- (c) PUT /api/projects/{id} --------------------------------------------------------------------
@pytest.fixture()
def local_sources(run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """FIREFEED_LOCAL_SOURCES_ROOT for specs sent without a folder (their `main.csv` is <root>/<company>/)."""
    root = tmp_path / "feeds"
    monkeypatch.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(root))
    reset_settings()
    yield root
    reset_settings()


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_a_put_spec_and_a_run_write_the_columns_in_the_spec_order(
    http: httpx.Client, run_env: Path, local_sources: Path, content_type: str
) -> None:
    company, auth = new_company("so_")
    write_feed(local_sources / company)
    project = "order_api_" + uuid.uuid4().hex[:6]
    doc = spec_doc(company, project)
    body = json.dumps(doc) if content_type == "application/json" else yaml.safe_dump(doc, sort_keys=False)
    put = http.put(f"/api/projects/{project}", headers={**auth, "Content-Type": content_type}, content=body)
    assert put.status_code == 201, put.text

    stored = http.get(f"/api/projects/{project}", headers=auth).json()
    assert [list(e["fields"]) for e in stored["exports"]] == [list(FIELDS)] * len(FORMATS)
    assert list(stored["rules"][0]["then"][0]["values"]) == list(MAP_VALUES)
    assert list(stored["sources"][0]["headers"]) == list(HEADERS)

    run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=auth).json()["run_id"]
    execute_run(run_id)
    report = http.get(f"/api/runs/{run_id}", headers=auth).json()
    assert_columns_in_spec_order(report, run_env, company, project)
    assert_spec_keeps_its_order(RunStore(), run_id)


def test_putting_another_companys_project_answers_exactly_like_a_missing_one(
    http: httpx.Client, run_env: Path, local_sources: Path
) -> None:
    owner, owner_auth = new_company("so_")
    intruder, auth = new_company("so_")
    taken = "order_own_" + uuid.uuid4().hex[:6]
    assert http.put(f"/api/projects/{taken}", headers=owner_auth, json=spec_doc(owner, taken)).status_code == 201
    missing = "order_no_" + uuid.uuid4().hex[:6]

    put = http.put(f"/api/projects/{taken}", headers=auth, json=spec_doc(intruder, taken))
    unknown = http.get(f"/api/projects/{missing}", headers=auth)
    assert (put.status_code, unknown.status_code) == (404, 404)
    assert put.json() == {"error": "not_found", "message": f"unknown project {taken!r}"}
    assert put.json() == {k: v.replace(missing, taken) for k, v in unknown.json().items()}
    assert put.headers["content-type"] == unknown.headers["content-type"]
    assert http.get(f"/api/projects/{taken}", headers=owner_auth).json()["company"] == owner


# -- the processes table: a spec sent as text keeps its order -------------------------------------
def test_a_spec_applied_as_text_through_a_processes_row_keeps_its_order(
    engine: Engine,
    run_env: Path,
    local_sources: Path,
    workspace: str,  # noqa: F811 - the fixture of test_processes
    make_worker: Any,  # noqa: F811
) -> None:
    write_feed(local_sources / workspace)
    project = "order_pr_" + uuid.uuid4().hex[:6]
    text = yaml.safe_dump(spec_doc(workspace, project), sort_keys=False)
    applied = insert(engine, "firefeed.project.apply", {"spec": text}, workspace=workspace)
    ran = insert(engine, "firefeed.pipeline.run", {"project": project}, workspace=workspace)
    make_worker().drain()
    assert row(engine, applied)["status"] == "completed", row(engine, applied)["error_message"]
    done = row(engine, ran)
    assert done["status"] == "completed", done["error_message"]
    assert_columns_in_spec_order(done["output_data"], run_env, workspace, project)


# -- NUL characters (SPEC 8.24) ---------------------------------------------------------------------
NUL_VALUE_YAML = """\
company: acme
project: {project}
sources: [{{name: main, url: main.csv}}]
rules:
  - name: r
    then: [{{set: title, value: "a\\0b"}}]
exports: [{{name: csv, format: csv, path: out.csv}}]
"""


def test_a_nul_in_a_spec_value_exits_2_naming_the_key_even_with_json(
    run_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_feed(tmp_path)
    path = tmp_path / "nul.yaml"
    path.write_text(NUL_VALUE_YAML.format(project="nul_" + uuid.uuid4().hex[:6]), encoding="utf-8")
    code, out = cli("run", str(path))
    assert code == 2
    assert "rules[0].then[0].value: holds a NUL character" in capsys.readouterr().err
    code, out = cli("run", str(path), "--json")
    assert code == 2
    error = json.loads(out)["error"]
    assert (error["type"], error["path"]) == ("SpecError", "rules[0].then[0].value")
    assert "NUL" in error["message"]
    assert cli("apply", str(path))[0] == 2


def test_a_nul_in_a_put_spec_is_a_422_naming_the_key(http: httpx.Client) -> None:
    company, auth = new_company("so_")
    project = "nul_api_" + uuid.uuid4().hex[:6]
    doc = spec_doc(company, project)
    doc["rules"][0]["then"][0]["values"]["ro\x00sso"] = "red"
    r = http.put(f"/api/projects/{project}", headers=auth, content=json.dumps(doc))
    assert r.status_code == 422, r.text
    assert r.json()["path"] == 'rules[0].then[0].values["ro\\u0000sso"]'
    assert "NUL" in r.json()["message"]
    doc = spec_doc(company, project)
    doc["sources"][0]["headers"] = {"X-A": "x\x00"}
    r = http.put(f"/api/projects/{project}", headers=auth, content=json.dumps(doc))
    assert (r.status_code, r.json()["path"]) == (422, "sources[0].headers.X-A")
    assert http.get(f"/api/projects/{project}", headers=auth).status_code == 404


def test_a_nul_in_a_processes_spec_fails_the_row_naming_the_key(
    engine: Engine,
    workspace: str,  # noqa: F811
    make_worker: Any,  # noqa: F811
) -> None:
    doc = spec_doc(workspace, "nul_pr_" + uuid.uuid4().hex[:6])
    doc["exports"][0]["fields"] = {"ID": "i\x00d"}
    pid = insert(engine, "firefeed.project.apply", {"spec": json.dumps(doc)}, workspace=workspace)
    make_worker().drain()
    r = row(engine, pid)
    assert r["status"] == "failed"
    assert "exports[0].fields.ID: holds a NUL character" in r["error_message"]
