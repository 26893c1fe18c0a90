"""A local source outside the allowed folders, or a secret the company lacks, is a spec error when applied (#48)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from firefeed.cli import EXIT_BAD_INPUT
from firefeed.config import reset_settings
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore
from tests.integration.conftest import cli, new_company, write_csv

pytestmark = pytest.mark.integration


def _spec(folder: Path, company: str, url: str, **source: object) -> Path:
    project = "chk_" + uuid.uuid4().hex[:8]
    doc = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": url, "format": "csv", **source}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_a_local_source_outside_the_spec_folder_is_refused_by_run_naming_the_allowed_folders(
    run_env: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "spec"
    folder.mkdir()
    write_csv(tmp_path / "elsewhere.csv", ["id"], [["1"]])
    code, out = cli("run", str(_spec(folder, "co_" + uuid.uuid4().hex[:8], "../elsewhere.csv")), "--json")
    error = json.loads(out)["error"]
    assert code == EXIT_BAD_INPUT
    assert error["path"] == "sources[0].url"
    assert "outside the allowed folders" in error["message"]
    assert str(folder.resolve()) in error["message"] and "FIREFEED_LOCAL_SOURCES_ROOT" in error["message"]


def test_a_link_made_after_the_apply_is_still_refused_at_fetch(run_env: Path, tmp_path: Path) -> None:
    folder = tmp_path / "spec"
    folder.mkdir()
    write_csv(tmp_path / "elsewhere.csv", ["id"], [["1"]])
    spec = _spec(folder, "co_" + uuid.uuid4().hex[:8], "main.csv")
    code, _ = cli("apply", str(spec))
    assert code == 0  # main.csv does not exist yet: nothing to judge
    (folder / "main.csv").symlink_to(tmp_path / "elsewhere.csv")
    project = yaml.safe_load(spec.read_text())["project"]
    report = execute_run(RunStore().request_run(project, "cli"))
    assert report["status"] == "FAILED" and report["error"]["step"] == "FETCH"
    assert "outside the allowed folders" in report["error"]["message"]


def test_a_secret_the_company_lacks_is_refused_when_applied_with_the_closest_name(
    run_env: Path, monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    reset_settings()
    company, auth = new_company()
    SecretStore().set(company, "SHOP_TOKEN", "s3cret-" + uuid.uuid4().hex)
    project = "sec_" + uuid.uuid4().hex[:8]
    doc = {
        "company": company,
        "project": project,
        "sources": [
            {
                "name": "main",
                "url": "https://feeds.example.com/a.csv",
                "headers": {"Authorization": "Bearer ${secret:SHOP_TOKN}"},
            }
        ],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    with httpx.Client(base_url=base_url, timeout=30) as http:
        r = http.put(f"/api/projects/{project}", headers=auth, json=doc)
        assert r.status_code == 422, r.text
        assert r.json()["path"] == "sources[0].headers.Authorization"
        assert f"company {company!r} has no secret 'SHOP_TOKN' (did you mean 'SHOP_TOKEN'?)" in r.json()["message"]
        doc["sources"][0]["headers"] = {"Authorization": "Bearer ${secret:SHOP_TOKEN}"}
        assert http.put(f"/api/projects/{project}", headers=auth, json=doc).status_code == 201
