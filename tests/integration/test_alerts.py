"""Alerts (SPEC 10 C8) end to end: a local HTTP sink on 127.0.0.1 records what each run's end sends.

The runs are real (`execute_run` on a file source), the outbox is Postgres, the secrets are the
company's; a sink that holds its answer, answers 500/503 or is down shows the run never waits.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from firefeed.alerts import outbox
from firefeed.alerts.events import record_delivery_failed
from firefeed.alerts.sender import wait_batches
from firefeed.config import reset_settings
from firefeed.errors import SpecError
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import parse_spec
from firefeed.tasks.queues import Queue
from tests.integration.celery_workers import flush_broker, in_process_worker, use_broker
from tests.integration.conftest import cli, eventually, write_csv
from tests.services import redis_db

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class Sink:
    """Records every POST; answers each with the next of `answers` (then `default`), after `hold` is set."""

    def __init__(self, answers: list[int] | None = None, default: int = 200) -> None:
        self.answers = list(answers or [])
        self.default = default
        #: a Location header sent with every answer (a redirect's), when set
        self.location: str | None = None
        self.hold = threading.Event()
        self.hold.set()
        self.received: list[Received] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                )
                sink.hold.wait(20)
                status = sink.answers.pop(0) if sink.answers else sink.default
                self.send_response(status)
                if sink.location is not None:
                    self.send_header("Location", sink.location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def events(self) -> list[str]:
        return [json.loads(r.body)["event"] for r in self.received]

    def close(self) -> None:
        self.hold.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture()
def sink() -> Iterator[Sink]:
    server = Sink()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def alerts_env(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A secrets key, no broker (this process sends), the sink on 127.0.0.1 allowed, quick retries."""
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")
    monkeypatch.delenv("FIREFEED_BROKER_URL", raising=False)
    monkeypatch.setenv("FIREFEED_ALERT_BACKOFF_S", "0.2")
    monkeypatch.setenv("FIREFEED_ALERT_BACKOFF_MAX_S", "0.4")
    monkeypatch.setenv("FIREFEED_ALERT_RETRY_FOR_S", "30")
    monkeypatch.setenv("FIREFEED_ALERT_TIMEOUT_S", "5")
    monkeypatch.setenv("FIREFEED_ALERT_BATCH_WAIT_S", "15")
    reset_settings()
    yield run_env
    assert wait_batches(20), "an alert thread outlived its bound"
    reset_settings()


@dataclass
class Project:
    company: str
    project: str
    folder: Path
    secret: str

    def feed(self, ids: list[str]) -> None:
        write_csv(self.folder / "items.csv", ["id", "title"], [[i, f"item {i}"] for i in ids])

    def run(self, *, accept_drop: bool = False) -> dict[str, Any]:
        return execute_run(RunStore().request_run(self.project, "cli", accept_drop=accept_drop))


def project_with(tmp_path: Path, alerts: list[dict[str, Any]], *, secret_name: str = "ALERTS_KEY") -> Project:
    """A project on a local csv with `alerts`, its company holding `secret_name`, applied from a folder."""
    company = "co_" + uuid.uuid4().hex[:10]
    value = f"hmac-key-{uuid.uuid4().hex}"
    SecretStore().set(company, secret_name, value)
    folder = tmp_path / uuid.uuid4().hex[:6]
    folder.mkdir()
    p = Project(company, "p_" + uuid.uuid4().hex[:10], folder, value)
    p.feed(["A1", "A2", "A3", "A4"])
    spec = {
        "company": company,
        "project": p.project,
        "sources": [{"name": "main", "url": "items.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": f"{p.project}/out.csv"}],
        "alerts": alerts,
    }
    RunStore().apply_spec(parse_spec(spec), spec_dir=folder)
    return p


def verify(received: Received, key: str) -> bool:
    expected = "sha256=" + hmac.new(key.encode(), received.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(received.headers["x-firefeed-signature"], expected)


def alerts_of(project: str) -> list[dict[str, Any]]:
    from firefeed.db.engine import get_engine

    return list(reversed(outbox.recent(get_engine(), project, limit=50)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- the events


def test_failed_blocked_and_recovered_each_post_once_with_their_body_and_a_signature_the_secret_verifies(
    alerts_env: Path, sink: Sink, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])
    reports = [p.run()]  # SUCCEEDED with no failure before it: nothing
    (p.folder / "items.csv").unlink()
    reports.append(p.run())  # FAILED at FETCH: failed
    p.feed(["A1", "A2", "A3", "A4"])
    reports.append(p.run())  # recovered
    reports.append(p.run())  # a second success in a row: nothing
    p.feed(["A1"])
    reports.append(p.run())  # 3 of 4 items dropped, over max_drop 50%: blocked
    reports.append(p.run(accept_drop=True))  # recovered
    assert [r["status"] for r in reports] == ["SUCCEEDED", "FAILED", "SUCCEEDED", "SUCCEEDED", "FAILED", "SUCCEEDED"]
    assert reports[4]["error"]["type"] == "DropGuardError"
    assert wait_batches(20)

    assert sink.events() == ["failed", "recovered", "blocked", "recovered"]
    bodies = [json.loads(r.body) for r in sink.received]
    for body, run in zip(bodies, [reports[1], reports[2], reports[4], reports[5]], strict=True):
        assert set(body) == {"event", "company", "project", "run_id", "status", "error", "export", "links", "at"}
        assert (body["company"], body["project"], body["run_id"]) == (p.company, p.project, run["run_id"])
        assert body["status"] == run["status"]
        assert body["error"] == run["error"]
        assert body["links"]["run"].endswith(f"/api/runs/{run['run_id']}")
    assert bodies[0]["error"]["step"] == "FETCH" and bodies[0]["export"] is None
    assert bodies[2]["error"]["type"] == "DropGuardError" and bodies[2]["export"] == "csv"
    assert bodies[1]["error"] is None and bodies[3]["error"] is None
    for received, alert in zip(sink.received, alerts_of(p.project), strict=True):
        assert verify(received, p.secret)
        assert received.headers["content-type"] == "application/json"
        assert received.headers["x-firefeed-event"] == json.loads(received.body)["event"]
        assert received.headers["x-firefeed-delivery"] == str(alert["id"])
        assert (alert["status"], alert["attempts"], alert["outcomes"][0]["status_code"]) == ("delivered", 1, 200)
    assert not verify(sink.received[0], p.secret + "x")

    # The secret's value is only the HMAC's key: in no report, log line, alert row or listing.
    code, listing = cli("alerts", p.project, "--json")
    assert code == 0 and len(json.loads(listing)) == 4
    for text in [json.dumps(reports), caplog.text, json.dumps(alerts_of(p.project), default=str), listing]:
        assert p.secret not in text
    assert all(p.secret.encode() not in r.body for r in sink.received)


def test_a_run_end_recorded_twice_alerts_once_and_an_alert_hears_only_the_events_it_lists(
    alerts_env: Path, sink: Sink, tmp_path: Path
) -> None:
    from firefeed.alerts.events import record_run_end

    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY", "on": ["failed"]}])
    (p.folder / "items.csv").unlink()
    failed = p.run()
    assert record_run_end(failed["run_id"], failed) == []  # its end again (a takeover, a recovery): no new row
    p.feed(["A1"])
    p.run()  # recovered, but this alert listens to `failed` only
    assert wait_batches(20)
    assert sink.events() == ["failed"]
    assert [a["event"] for a in alerts_of(p.project)] == ["failed"]


def test_delivery_failed_is_recorded_by_the_function_delivery_calls_and_sent_once_per_export_and_run(
    alerts_env: Path, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_PUBLIC_URL", "https://firefeed.example/")
    reset_settings()
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY", "on": ["delivery_failed"]}])
    run = p.run()
    assert wait_batches(20) and sink.received == []
    first = record_delivery_failed(run["run_id"], "csv", "sftp://shop.example:22/feeds/out.csv", "connection refused")
    again = record_delivery_failed(run["run_id"], "csv", "sftp://shop.example:22/feeds/out.csv", "still refused")
    assert len(first) == 1 and again == []
    assert wait_batches(20)
    (received,) = sink.received
    body = json.loads(received.body)
    assert (body["event"], body["export"], body["status"], body["run_id"]) == (
        "delivery_failed",
        "csv",
        "SUCCEEDED",
        run["run_id"],
    )
    assert body["error"]["target"] == "sftp://shop.example:22/feeds/out.csv"
    assert body["error"]["message"] == "connection refused"
    assert body["links"] == {
        "run": f"https://firefeed.example/api/runs/{run['run_id']}",
        "project": f"https://firefeed.example/api/projects/{p.project}",
    }
    assert verify(received, p.secret)


# ---------------------------------------------------------------- never holding up a run, retries


def test_a_sink_that_holds_then_answers_500_is_retried_with_backoff_after_the_run_has_ended(
    alerts_env: Path, sink: Sink, tmp_path: Path
) -> None:
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])
    (p.folder / "items.csv").unlink()
    sink.hold.clear()  # the sink takes the POST and does not answer
    sink.answers = [500, 500]
    began = time.monotonic()
    report = p.run()
    ended = time.monotonic() - began
    assert report["status"] == "FAILED"
    assert alerts_of(p.project)[0]["status"] == "pending"  # the run ended; its alert is not sent yet
    time.sleep(0.5)
    assert len(sink.received) == 1 and sink.received[0].at - began < ended + 0.5  # posted while the run ended
    sink.hold.set()
    assert wait_batches(20)

    (alert,) = alerts_of(p.project)
    assert (alert["status"], alert["attempts"]) == ("delivered", 3)
    assert [o["status_code"] for o in alert["outcomes"]] == [500, 500, 200]
    assert alert["outcomes"][0]["error"] == "answered 500: ok"
    gaps = [b.at - a.at for a, b in zip(sink.received, sink.received[1:], strict=False)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # FIREFEED_ALERT_BACKOFF_S, doubled
    assert len({r.body for r in sink.received}) == 1  # every attempt sends the same signed bytes
    assert all(verify(r, p.secret) for r in sink.received)


def test_the_logs_name_an_alert_urls_host_never_its_path_or_query_which_may_carry_a_token(
    alerts_env: Path, sink: Sink, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = "T0KEN" + uuid.uuid4().hex
    url = sink.url.replace("/hook", f"/services/{token}/hook?key={token}q")
    p = project_with(tmp_path, [{"url": url, "secret": "ALERTS_KEY"}])
    (p.folder / "items.csv").unlink()
    sink.answers = [500]  # a retry logged, then a delivery logged
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)
    (alert,) = alerts_of(p.project)
    assert alert["status"] == "delivered" and token in sink.received[0].path
    assert f"127.0.0.1:{sink.httpd.server_address[1]}" in caplog.text
    assert token not in caplog.text


def test_retries_of_a_sink_that_is_down_stop_after_the_retry_time_and_the_listing_says_why(
    alerts_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_ALERT_RETRY_FOR_S", "1.5")
    reset_settings()
    down = f"http://127.0.0.1:{free_port()}/hook"
    p = project_with(tmp_path, [{"url": down, "secret": "ALERTS_KEY"}])
    (p.folder / "items.csv").unlink()
    began = time.monotonic()
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)
    assert time.monotonic() - began < 10

    (alert,) = alerts_of(p.project)
    # Attempts at 0, 0.2, 0.6, 1.0, 1.4 s; the next (1.8 s) would pass the 1.5 s retry time. (A loaded
    # machine makes fewer in that time, never more.)
    assert alert["status"] == "failed"
    assert 2 <= alert["attempts"] <= 5
    assert len(alert["outcomes"]) == alert["attempts"]
    assert all(o["status_code"] is None and "ConnectError" in o["error"] for o in alert["outcomes"])
    code, out = cli("alerts", p.project)
    assert code == 0
    assert "failed" in out and f"{alert['attempts']} attempt(s)" in out and "ConnectError" in out


def test_a_batch_process_bounds_its_sending_and_alerts_send_delivers_what_it_left_pending(
    alerts_env: Path, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_ALERT_BATCH_WAIT_S", "0")  # one attempt, then this process lets go
    reset_settings()
    sink.answers = [500]
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])
    (p.folder / "items.csv").unlink()
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)
    (alert,) = alerts_of(p.project)
    assert (alert["status"], alert["attempts"]) == ("pending", 1)
    time.sleep(0.3)  # past its backoff
    code, out = cli("alerts", "send", p.project)
    assert code == 0 and f"alert {alert['id']}: delivered" in out
    (alert,) = alerts_of(p.project)
    assert (alert["status"], [o["status_code"] for o in alert["outcomes"]]) == ("delivered", [500, 200])
    assert sink.events() == ["failed", "failed"]


# ---------------------------------------------------------------- hostile addresses, secrets at apply


def alert_spec(company: str, url: str, secret: str = "ALERTS_KEY") -> dict[str, Any]:
    return {
        "company": company,
        "project": "p_" + uuid.uuid4().hex[:10],
        "sources": [{"name": "main", "url": "items.csv"}],
        "alerts": [{"url": url, "secret": secret}],
    }


def test_apply_refuses_metadata_and_loopback_alert_urls_and_a_secret_the_company_lacks(
    alerts_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    company = "co_" + uuid.uuid4().hex[:10]
    SecretStore().set(company, "ALERTS_KEY", "k-" + uuid.uuid4().hex)
    store = RunStore()
    with pytest.raises(SpecError) as err:  # metadata: refused even with FIREFEED_FETCH_ALLOW_PRIVATE
        store.apply_spec(parse_spec(alert_spec(company, "http://169.254.169.254/latest")), spec_dir=tmp_path)
    assert err.value.path == "alerts[0].url" and "169.254.0.0/16 link-local, cloud metadata" in str(err.value)

    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "false")
    reset_settings()
    for url, said in [("http://localhost:8080/x", "is this machine"), ("https://10.1.2.3/x", "private use")]:
        with pytest.raises(SpecError) as err:
            store.apply_spec(parse_spec(alert_spec(company, url)), spec_dir=tmp_path)
        assert err.value.path == "alerts[0].url" and said in str(err.value)
        assert "FIREFEED_FETCH_ALLOWED_HOSTS" in str(err.value)

    with pytest.raises(SpecError) as err:
        store.apply_spec(parse_spec(alert_spec(company, "https://hooks.example.com/x", "ALERT_KEY")), spec_dir=tmp_path)
    assert err.value.path == "alerts[0].secret"
    assert "has no secret 'ALERT_KEY'" in str(err.value) and "ALERTS_KEY" in str(err.value)  # did you mean

    for bad, path in [
        ({"url": "ftp://hooks.example.com/x", "secret": "ALERTS_KEY"}, "alerts[0].url"),
        ({"url": "https://u:pw@hooks.example.com/x", "secret": "ALERTS_KEY"}, "alerts[0].url"),
        ({"url": "https://hooks.example.com/x", "on": ["exploded"], "secret": "ALERTS_KEY"}, "alerts[0].on[0]"),
        ({"url": "https://hooks.example.com/x"}, "alerts[0].secret"),
    ]:
        with pytest.raises(SpecError) as err:
            parse_spec({**alert_spec(company, "https://x.example.com"), "alerts": [bad]})
        assert err.value.path == path


def test_an_alert_whose_host_the_rules_refuse_when_it_is_sent_fails_at_once_without_retrying(
    alerts_env: Path, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])  # allowed when applied
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "false")  # the operator closes loopback since
    reset_settings()
    (p.folder / "items.csv").unlink()
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)
    assert sink.received == []
    (alert,) = alerts_of(p.project)
    assert (alert["status"], alert["attempts"]) == ("failed", 1)
    assert "non-public address (127.0.0.0/8 loopback" in alert["outcomes"][0]["error"]


# ---------------------------------------------------------------- with a broker: tasks on `control`

ALERTS_REDIS_URL = redis_db(4)


def test_with_a_broker_a_lost_alert_is_swept_into_a_control_task_that_retries_it_after_the_backoff(
    alerts_env: Path, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import firefeed.tasks.alerts  # noqa: F401  (registers the tasks with the in-process worker)
    from firefeed.alerts.sender import SWEEP_TASK
    from firefeed.celery_app import app

    monkeypatch.setenv("FIREFEED_BROKER_URL", ALERTS_REDIS_URL)
    reset_settings()
    use_broker(ALERTS_REDIS_URL)
    flush_broker(ALERTS_REDIS_URL)
    try:
        p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])
        (p.folder / "items.csv").unlink()
        assert p.run()["status"] == "FAILED"  # no worker yet: the task waits in the broker
        assert not any(t.name == "firefeed-alerts" for t in threading.enumerate())  # no batch thread
        flush_broker(ALERTS_REDIS_URL)  # ... and is lost
        assert [a["status"] for a in alerts_of(p.project)] == ["pending"]

        sink.answers = [503]
        with in_process_worker(queues=(Queue.CONTROL.value,)):
            app.send_task(SWEEP_TASK, queue=Queue.CONTROL.value)
            assert eventually(lambda: alerts_of(p.project)[0]["status"] == "delivered", timeout=20)
    finally:
        use_broker("memory://")
    (alert,) = alerts_of(p.project)
    assert [o["status_code"] for o in alert["outcomes"]] == [503, 200]
    assert sink.events() == ["failed", "failed"]
    assert sink.received[1].at - sink.received[0].at >= 0.2  # sent again with the backoff as its countdown
    assert all(verify(r, p.secret) for r in sink.received)
