"""Per-company secrets end to end: the store, `firefeed secret`, /api/secrets, and `${secret:NAME}` in a fetch.

A local HTTP server on 127.0.0.1 plays the merchant's feed server and records what
it is sent, so each test sees the secret really arrive, and only where it should.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import text

from firefeed.config import get_settings, reset_settings
from firefeed.db.engine import get_engine
from firefeed.errors import ConfigError, NotFoundError, SpecError
from firefeed.pipeline.run import execute_run
from firefeed.processes.registry import JobContext, project_apply
from firefeed.runs.service import RunStore
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli, new_company

pytestmark = pytest.mark.integration

CSV = b"id,title,price\nA1,Shoe,10\nA2,Boot,20\n"

Answer = Callable[[BaseHTTPRequestHandler], None]


class FeedServer:
    """Answers each path as told and records every request's path (with its query) and headers."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                answer = server.answers.get(self.path.split("?", 1)[0])
                if answer is None:
                    self.send_error(404)
                else:
                    answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def answer(status: int, data: bytes = b"", **headers: str) -> Answer:
    def respond(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            h.send_header(name.replace("_", "-"), value)
        h.end_headers()
        h.wfile.write(data)

    return respond


@pytest.fixture()
def feeds() -> Iterator[FeedServer]:
    server = FeedServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def secrets_env(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A secrets key, private addresses allowed (the feed server is on 127.0.0.1), quick retries."""
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")
    monkeypatch.setenv("FIREFEED_FETCH_BACKOFF_S", "0.01")
    monkeypatch.setenv("FIREFEED_FETCH_RETRIES", "1")
    monkeypatch.delenv("FIREFEED_SPEC_ENV_ALLOW", raising=False)
    reset_settings()
    yield run_env
    reset_settings()


def secret_value(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


def spec_of(
    company: str, url: str, headers: dict[str, str] | None = None, project: str | None = None
) -> dict[str, Any]:
    return {
        "company": company,
        "project": project or "p_" + uuid.uuid4().hex[:10],
        "sources": [{"name": "main", "url": url, "format": "csv", "headers": headers or {}}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def run_stored(project: str, trigger: str = "api") -> dict[str, Any]:
    store = RunStore()
    return execute_run(store.request_run(project, trigger))


# ---------------------------------------------------------------- the store


def test_a_secret_is_stored_encrypted_listed_by_name_and_resolved_for_its_company_only(
    secrets_env: Path, engine: Any
) -> None:
    company, other = "co_" + uuid.uuid4().hex[:10], "co_" + uuid.uuid4().hex[:10]
    value = secret_value("tok")
    store = SecretStore()
    assert store.set(company, "SHOP_TOKEN", value) is True
    assert store.set(company, "SHOP_TOKEN", value + "2") is False  # replaced
    assert store.set(company, "OTHER", "x" * 10) is True
    assert [s.name for s in store.list(company)] == ["OTHER", "SHOP_TOKEN"]
    assert store.list(other) == []
    assert store.resolve(company, "SHOP_TOKEN") == value + "2"
    assert store.resolve(other, "SHOP_TOKEN") is None

    with engine.connect() as conn:
        stored = conn.execute(
            text("SELECT ciphertext FROM company_secrets WHERE company_id = :c AND name = 'SHOP_TOKEN'"), {"c": company}
        ).scalar_one()
    assert value not in stored and stored.startswith("v1.")

    store.delete(company, "OTHER")
    with pytest.raises(NotFoundError, match="has no secret 'OTHER'"):
        store.delete(company, "OTHER")
    with pytest.raises(ValueError, match="secret name"):
        store.set(company, "bad-name", "x")
    with pytest.raises(ValueError, match="line break") as err:
        store.set(company, "T", f"{value}\r\nX-Evil: 1")
    assert value not in str(err.value)


def test_without_a_key_setting_a_secret_is_refused_naming_the_variable(
    secrets_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FIREFEED_SECRETS_KEY")
    reset_settings()
    with pytest.raises(ConfigError, match="FIREFEED_SECRETS_KEY is not set"):
        SecretStore().set("co_nokey", "T", "value")


# ---------------------------------------------------------------- the CLI


def test_the_cli_sets_from_stdin_or_a_file_lists_names_and_deletes_without_ever_printing_a_value(
    secrets_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    company = "co_" + uuid.uuid4().hex[:10]
    piped, filed = secret_value("piped"), secret_value("filed")
    monkeypatch.setattr("sys.stdin", io.StringIO(piped + "\n"))
    code, out = cli("secret", "set", "--company", company, "PIPED")
    assert code == 0 and "${secret:PIPED}" in out
    (tmp_path / "value.txt").write_text(filed + "\n", encoding="utf-8")
    code, out = cli("secret", "set", "--company", company, "FILED", "--value-file", str(tmp_path / "value.txt"))
    assert code == 0
    assert SecretStore().resolve(company, "PIPED") == piped
    assert SecretStore().resolve(company, "FILED") == filed

    code, listed = cli("secret", "list", "--company", company)
    assert code == 0 and "FILED" in listed and "PIPED" in listed
    # The name column is as wide as the longest name listed, not padded to the longest allowed (#48).
    assert [line[:7] for line in listed.splitlines()] == ["name   ", "FILED  ", "PIPED  "]
    assert listed.splitlines()[1][7:9] == "20"  # the date right after
    code, listed_json = cli("secret", "list", "--company", company, "--json")
    assert [s["name"] for s in json.loads(listed_json)] == ["FILED", "PIPED"]
    assert set(json.loads(listed_json)[0]) == {"name", "updated_at"}

    assert cli("secret", "delete", "--company", company, "PIPED")[0] == 0
    assert cli("secret", "delete", "--company", company, "PIPED")[0] == 4
    code, _ = cli("secret", "set", "--company", company, "bad-name", "--value-file", str(tmp_path / "value.txt"))
    assert code == 2
    printed = out + listed + listed_json + "".join(capsys.readouterr())
    assert piped not in printed and filed not in printed


def test_the_cli_refuses_to_set_a_secret_without_a_key(
    secrets_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FIREFEED_SECRETS_KEY")
    reset_settings()
    monkeypatch.setattr("sys.stdin", io.StringIO("value\n"))
    code, _ = cli("secret", "set", "--company", "co_nokey", "T")
    assert code == 2
    assert "FIREFEED_SECRETS_KEY" in capsys.readouterr().err


# ---------------------------------------------------------------- the API


def test_the_api_sets_lists_and_deletes_the_tokens_companys_secrets_and_never_reads_one_back(
    secrets_env: Path, http: httpx.Client
) -> None:
    company, auth = new_company()
    other, other_auth = new_company()
    value = secret_value("api")
    created = http.put("/api/secrets/SHOP_TOKEN", headers=auth, json={"value": value})
    assert created.status_code == 201, created.text
    assert created.json() == {
        "company": company,
        "name": "SHOP_TOKEN",
        "created": True,
        "reference": "${secret:SHOP_TOKEN}",
    }
    replaced = http.put("/api/secrets/SHOP_TOKEN", headers=auth, json={"value": value})
    assert (replaced.status_code, replaced.json()["created"]) == (200, False)

    listed = http.get("/api/secrets", headers=auth)
    assert listed.status_code == 200
    assert [s["name"] for s in listed.json()["secrets"]] == ["SHOP_TOKEN"]
    assert set(listed.json()["secrets"][0]) == {"name", "updated_at"}
    assert http.get("/api/secrets", headers=other_auth).json() == {"company": other, "secrets": []}

    # No route reads a value: not by name, not in the OpenAPI document.
    assert http.get("/api/secrets/SHOP_TOKEN", headers=auth).status_code == 405
    paths = http.get("/openapi.json").json()["paths"]
    assert set(paths["/api/secrets/{name}"]) == {"put", "delete"}
    assert set(paths["/api/secrets"]) == {"get"}

    # Bad input is a 422 that does not quote the value; no token is a 401.
    bad = http.put("/api/secrets/SHOP_TOKEN", headers=auth, json={"value": f"{value}\nX-Evil: 1"})
    assert (bad.status_code, bad.json()["error"], bad.json()["path"]) == (422, "invalid_request", "body.value")
    assert value not in bad.text
    bad = http.put("/api/secrets/no-dashes", headers=auth, json={"value": "x"})
    assert (bad.status_code, bad.json()["path"]) == (422, "path.name")
    assert http.put("/api/secrets/X", headers=auth, json={"value": "x", "extra": 1}).status_code == 422
    assert http.get("/api/secrets").status_code == 401

    # Another company cannot delete it; the owner can, once.
    assert http.delete("/api/secrets/SHOP_TOKEN", headers=other_auth).status_code == 404
    assert http.delete("/api/secrets/SHOP_TOKEN", headers=auth).status_code == 204
    gone = http.delete("/api/secrets/SHOP_TOKEN", headers=auth)
    assert (gone.status_code, gone.json()["error"]) == (404, "not_found")
    for r in (created, replaced, listed):
        assert value not in r.text


def test_the_api_answers_a_config_error_when_the_server_has_no_key(
    secrets_env: Path, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, auth = new_company()
    monkeypatch.delenv("FIREFEED_SECRETS_KEY")
    reset_settings()
    r = http.put("/api/secrets/T", headers=auth, json={"value": "v"})
    assert (r.status_code, r.json()["error"]) == (503, "config_error")
    assert "FIREFEED_SECRETS_KEY" in r.json()["message"]


@pytest.mark.parametrize("var", ["FIREFEED_DATABASE_URL", "FIREFEED_NO_SUCH_VARIABLE_AT_ALL"])
def test_an_api_spec_naming_an_environment_variable_is_refused_naming_the_key_and_nothing_is_sent(
    secrets_env: Path, http: httpx.Client, feeds: FeedServer, var: str
) -> None:
    company, auth = new_company()
    feeds.answers["/f.csv"] = answer(200, CSV)
    for where in ("headers", "url"):
        if where == "headers":
            spec = spec_of(company, feeds.url("/f.csv"), {"X-Db": f"${{{var}}}"})
            path = "sources[0].headers.X-Db"
        else:
            spec = spec_of(company, feeds.url("/f.csv") + f"?db=${{{var}}}")
            path = "sources[0].url"
        project = spec["project"]
        for method, route in (("PUT", f"/api/projects/{project}"), ("POST", f"/api/projects/{project}/preview")):
            r = http.request(method, route, headers=auth, json=spec)
            assert (r.status_code, r.json()["error"], r.json()["path"]) == (422, "spec_error", path), r.text
            assert r.json()["message"] == (
                "environment variables can't be used in specs sent over the API or the processes table; "
                "use ${secret:NAME}"
            )
    assert feeds.requests == []
    assert get_settings().database_url not in json.dumps(feeds.requests)


def test_a_processes_spec_naming_an_environment_variable_is_refused(secrets_env: Path, engine: Any) -> None:
    workspace = "co_" + uuid.uuid4().hex[:10]
    spec = spec_of(workspace, "https://feeds.example.com/f.csv", {"X-Db": "${FIREFEED_DATABASE_URL}"})
    ctx = JobContext(
        process_id=0,
        workspace_id=workspace,
        worker="test",
        input={"spec": spec},
        engine=engine,
        settings=get_settings(),
    )
    with pytest.raises(SpecError) as err:
        project_apply(ctx)
    assert err.value.path == "sources[0].headers.X-Db"


def test_an_api_spec_gets_its_own_companys_secret_in_a_header_and_the_url_and_no_other_companys(
    secrets_env: Path, http: httpx.Client, feeds: FeedServer
) -> None:
    company, auth = new_company()
    other, other_auth = new_company()
    token, key = secret_value("tok"), "k/" + secret_value("key")
    assert http.put("/api/secrets/TOKEN", headers=auth, json={"value": token}).status_code == 201
    assert http.put("/api/secrets/KEY", headers=auth, json={"value": key}).status_code == 201
    feeds.answers["/f.csv"] = answer(200, CSV)
    url = feeds.url("/f.csv") + "?key=${secret:KEY}"
    headers = {"Authorization": "Bearer ${secret:TOKEN}"}

    spec = spec_of(company, url, headers)
    preview = http.post(f"/api/projects/{spec['project']}/preview", headers=auth, json=spec)
    assert preview.status_code == 200, preview.text
    put = http.put(f"/api/projects/{spec['project']}", headers=auth, json=spec)
    assert put.status_code == 201, put.text
    report = run_stored(spec["project"])
    assert report["status"] == "SUCCEEDED", report["error"]
    assert len(feeds.requests) == 2
    for path, seen in feeds.requests:
        assert seen["authorization"] == f"Bearer {token}"
        assert path == "/f.csv?key=" + key.replace("/", "%2F")
    assert http.get(f"/api/projects/{spec['project']}", headers=auth).json()["sources"][0]["headers"] == headers

    # The same references in another company's spec find nothing: secrets are per company.
    theirs = spec_of(other, url, headers)
    r = http.post(f"/api/projects/{theirs['project']}/preview", headers=other_auth, json=theirs)
    # The spec's mistake, found before any server was asked: 422, not a 502 blaming a server.
    assert (r.status_code, r.json()["error"], r.json()["source"]) == (422, "invalid_source_request", "main"), r.text
    assert f"which company {other!r} has not set" in r.json()["message"]
    assert len(feeds.requests) == 2


# ---------------------------------------------------------------- CLI specs and the environment


def test_a_cli_spec_reads_only_allowed_variables_and_keeps_them_for_later_runs_until_an_api_put(
    secrets_env: Path,
    tmp_path: Path,
    http: httpx.Client,
    feeds: FeedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    company, auth = new_company()
    env_token = secret_value("env")
    monkeypatch.setenv("SHOP_TOKEN", env_token)
    monkeypatch.setenv("FIREFEED_SPEC_ENV_ALLOW", "SHOP_*")
    reset_settings()
    feeds.answers["/f.csv"] = answer(200, CSV)
    spec = spec_of(company, feeds.url("/f.csv"), {"X-Token": "${SHOP_TOKEN}"})
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec), encoding="utf-8")

    code, out = cli("run", str(spec_file), "--json")
    assert code == 0, out
    # A later run re-reads the stored spec (beat, an API request): the CLI's ${VAR} still expands.
    assert run_stored(spec["project"], "beat")["status"] == "SUCCEEDED"
    assert [seen["x-token"] for _, seen in feeds.requests] == [env_token, env_token]

    # The same spec over the API is refused; one without ${VAR} replaces it and the spec loses the environment.
    r = http.put(f"/api/projects/{spec['project']}", headers=auth, json=spec)
    assert (r.status_code, r.json()["path"]) == (422, "sources[0].headers.X-Token")
    r = http.put(f"/api/projects/{spec['project']}", headers=auth, json=dict(spec, name="over the api"))
    assert r.status_code == 422
    plain = spec_of(company, feeds.url("/f.csv"), {"X-Token": "literal"}, project=spec["project"])
    assert http.put(f"/api/projects/{spec['project']}", headers=auth, json=plain).status_code == 200
    assert RunStore().project(spec["project"]).spec_dir is None

    # A variable outside the allow list is refused at apply, with one message whether it is set or not.
    messages = []
    for var in ("FIREFEED_DATABASE_URL", "FIREFEED_NO_SUCH_VARIABLE_AT_ALL"):
        denied = dict(spec, sources=[dict(spec["sources"][0], headers={"X-Db": f"${{{var}}}"})])
        spec_file.write_text(yaml.safe_dump(denied), encoding="utf-8")
        capsys.readouterr()
        assert cli("apply", str(spec_file))[0] == 2
        messages.append(capsys.readouterr().err.replace(var, "VAR"))
    assert messages[0] == messages[1]
    assert "sources[0].headers.X-Db" in messages[0] and "FIREFEED_SPEC_ENV_ALLOW" in messages[0]
    assert len(feeds.requests) == 2


def test_a_stored_api_spec_that_names_a_variable_is_refused_at_fetch_too(
    secrets_env: Path, feeds: FeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec stored before this check (or written to the table by hand) still cannot read the environment."""
    monkeypatch.setenv("FIREFEED_SPEC_ENV_ALLOW", "FIREFEED_*")
    reset_settings()
    company = "co_" + uuid.uuid4().hex[:10]
    feeds.answers["/f.csv"] = answer(200, CSV)
    spec = spec_of(company, feeds.url("/f.csv"), {"X-Db": "${FIREFEED_DATABASE_URL}"})
    folder = Path("/nonexistent-spec-folder")
    RunStore().apply_spec(parse_spec(spec), spec_dir=folder)
    with get_engine().begin() as conn:
        conn.execute(text("UPDATE projects SET spec_dir = NULL WHERE id = :p"), {"p": spec["project"]})
        # A run reads the spec version stored at apply (issue 16), so the hand edit goes there too.
        conn.execute(text("UPDATE spec_versions SET spec_dir = NULL WHERE project_id = :p"), {"p": spec["project"]})
    report = run_stored(spec["project"])
    assert report["status"] == "FAILED"
    assert "environment variables can't be used" in report["error"]["message"]
    assert feeds.requests == []


# ---------------------------------------------------------------- secrets never leak


def _everything_recorded(engine: Any, run_id: str, folders: list[Path]) -> str:
    """The run's rows (run, steps, jobs) and every file under `folders`, as one text."""
    parts: list[str] = []
    with engine.connect() as conn:
        for table, column in (("pipeline_runs", "id"), ("pipeline_steps", "run_id"), ("pipeline_jobs", "run_id")):
            rows = conn.execute(text(f"SELECT * FROM {table} WHERE {column} = :r"), {"r": run_id}).all()
            parts += [repr(tuple(row)) for row in rows]
            parts += [json.dumps([str(v) for v in row]) for row in rows]
    for folder in folders:
        for path in folder.rglob("*") if folder.exists() else []:
            if path.is_file():
                parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


@pytest.mark.parametrize("failure", ["401", "500", "redirect"])
def test_a_run_failing_on_an_authenticated_source_shows_the_secret_nowhere(
    secrets_env: Path,
    tmp_path: Path,
    engine: Any,
    feeds: FeedServer,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    company = "co_" + uuid.uuid4().hex[:10]
    token, key = secret_value("tok"), secret_value("key")
    store = SecretStore()
    store.set(company, "TOKEN", token)
    store.set(company, "KEY", key)
    feeds.answers["/f.csv"] = {
        "401": answer(401),
        "500": answer(500),
        # The server echoes the key into a redirect to a closed port: the connection error quotes the URL.
        "redirect": answer(302, Location=f"http://127.0.0.1:9/echo?key={key}"),
    }[failure]
    spec = spec_of(company, feeds.url("/f.csv") + "?key=${secret:KEY}", {"Authorization": "Bearer ${secret:TOKEN}"})
    RunStore().apply_spec(parse_spec(spec), spec_dir=None, company=company)

    caplog.set_level(logging.DEBUG)
    run_id = RunStore().request_run(spec["project"], "api")
    report = execute_run(run_id)

    assert report["status"] == "FAILED"
    assert feeds.requests and feeds.requests[0][1]["authorization"] == f"Bearer {token}"  # it was really sent
    assert feeds.requests[0][0] == f"/f.csv?key={key}"
    message = report["error"]["message"]
    expected = {"401": "HTTP 401", "500": "HTTP 500", "redirect": "could not fetch http://127.0.0.1:9/echo"}[failure]
    assert expected in message and "${secret:KEY}" in message, message
    recorded = _everything_recorded(engine, run_id, [secrets_env, tmp_path / "var"])
    for value in (token, key):
        assert value not in json.dumps(report)
        assert value not in caplog.text
        assert value not in recorded
    assert run_id in recorded  # the rows were really read


def test_a_worker_without_the_key_fails_the_fetch_naming_the_variable(
    secrets_env: Path, feeds: FeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    company = "co_" + uuid.uuid4().hex[:10]
    SecretStore().set(company, "TOKEN", secret_value("tok"))
    feeds.answers["/f.csv"] = answer(200, CSV)
    spec = spec_of(company, feeds.url("/f.csv"), {"Authorization": "Bearer ${secret:TOKEN}"})
    RunStore().apply_spec(parse_spec(spec), spec_dir=None, company=company)
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())  # another key: the stored value can't be opened
    reset_settings()
    report = run_stored(spec["project"])
    assert report["status"] == "FAILED"
    assert "${secret:TOKEN}" in report["error"]["message"]
    assert "cannot be decrypted with FIREFEED_SECRETS_KEY" in report["error"]["message"]
    monkeypatch.delenv("FIREFEED_SECRETS_KEY")
    reset_settings()
    report = run_stored(spec["project"])
    assert "FIREFEED_SECRETS_KEY is not set" in report["error"]["message"]
    assert feeds.requests == []
