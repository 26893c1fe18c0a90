"""One spec size cap at every entry point, and a bounded number of secrets per company (#47).

The API refused a spec over 1 MiB while the processes worker applied a 10 MB one; a company could
set any number of secrets.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from firefeed.config import get_settings, reset_settings
from firefeed.db.engine import raw_connection
from firefeed.processes.config import ProcessConfig
from firefeed.processes.worker import Worker
from firefeed.runs.service import RunStore
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore
from tests.integration.conftest import cli, new_company

pytestmark = pytest.mark.integration


def spec_of(company: str, project: str, pad: int) -> dict[str, Any]:
    return {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "https://feeds.example.test/main.csv"}],
        "rules": [{"name": "note", "then": [{"set": "note", "value": "x" * pad}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def process_row(engine: Engine, workspace: str, input_data: Any) -> int:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO processes (worker_type, workspace_id, function, input_data) "
            "VALUES ('etl', %s, 'firefeed.project.apply', %s) RETURNING id",
            (workspace, json.dumps(input_data)),
        )
        return int(cur.fetchone()[0])


def outcome(engine: Engine, process_id: int) -> tuple[str, str | None]:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SELECT status, error_message FROM processes WHERE id = %s", (process_id,))
        status, error = cur.fetchone()
    return str(status), error


def test_a_spec_over_the_one_cap_is_refused_by_the_api_the_processes_worker_and_the_cli_in_the_same_words(
    http: httpx.Client, engine: Engine, tmp_path: Path
) -> None:
    cap = get_settings().spec_max_bytes
    company, auth = new_company()
    project = "big_" + uuid.uuid4().hex[:8]
    spec = spec_of(company, project, cap)  # a little over the cap as JSON text
    body = json.dumps(spec)
    assert len(body) > cap

    refused = http.put(f"/api/projects/{project}", headers=auth, content=body)
    assert refused.status_code == 422, refused.text
    message = refused.json()["message"]
    assert message == f"the spec is larger than {cap} bytes (FIREFEED_SPEC_MAX_BYTES)"

    # The processes table, as an object and as text: the row fails with the API's words, nothing is applied.
    as_object = process_row(engine, company, {"spec": spec})
    as_text = process_row(engine, company, {"spec": body})
    fits = process_row(engine, company, {"spec": spec_of(company, project, 1000)})
    worker = Worker(
        engine=engine, settings=get_settings(), workspace_id=company, worker_type="etl", config=ProcessConfig()
    )
    try:
        assert worker.drain() == 3
    finally:
        worker.close()
    assert outcome(engine, as_object) == ("failed", message)
    assert outcome(engine, as_text) == ("failed", message)
    assert outcome(engine, fits) == ("completed", None)

    # A spec file for the CLI: the same cap, exit 2 (a bad spec), nothing applied.
    path = tmp_path / "big.json"
    path.write_text(json.dumps(spec_of(company, "cli_" + project, cap)), encoding="utf-8")
    assert cli("apply", str(path))[0] == 2
    with pytest.raises(Exception, match="unknown project"):
        RunStore().project("cli_" + project)


@pytest.fixture()
def few_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    monkeypatch.setenv("FIREFEED_SECRETS_PER_COMPANY", "3")
    reset_settings()
    yield
    reset_settings()


def test_a_secret_past_the_per_company_cap_is_refused_by_the_api_and_the_cli_and_replacing_one_is_not(
    http: httpx.Client, few_secrets: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    company, auth = new_company()
    for name in ("A", "B", "C"):
        assert http.put(f"/api/secrets/{name}", headers=auth, json={"value": "v-" + name}).status_code == 201

    refused = http.put("/api/secrets/D", headers=auth, json={"value": "v-D"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"] == "company_limit"
    assert "already has 3 secrets" in refused.json()["message"]
    assert "FIREFEED_SECRETS_PER_COMPANY=3" in refused.json()["message"]
    assert "v-D" not in refused.text

    monkeypatch.setattr("sys.stdin", io.StringIO("v-E\n"))
    assert cli("secret", "set", "--company", company, "E")[0] == 2
    assert "FIREFEED_SECRETS_PER_COMPANY=3" in capsys.readouterr().err

    # At the cap a secret can still be replaced, and deleting one makes room.
    assert http.put("/api/secrets/A", headers=auth, json={"value": "new"}).status_code == 200
    assert http.delete("/api/secrets/B", headers=auth).status_code == 204
    monkeypatch.setattr("sys.stdin", io.StringIO("v-E\n"))
    assert cli("secret", "set", "--company", company, "E")[0] == 0
    assert sorted(s.name for s in SecretStore().list(company)) == ["A", "C", "E"]
