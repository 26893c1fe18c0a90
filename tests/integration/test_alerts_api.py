"""A project's alerts over the real API (`GET /api/projects/{id}/alerts`) and the alert counters in /metrics.

Real runs end, their alerts go to a local HTTP sink on 127.0.0.1 from this process (no broker), and the
API server of the module (same process) answers the listing and /metrics. The sink, the env and the
project come from test_alerts.py.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import httpx
import pytest

from firefeed import metrics
from firefeed.alerts.sender import wait_batches
from firefeed.alerts.spec import AlertEvent
from firefeed.runs.tokens import TokenStore
from tests.integration import test_alerts
from tests.integration.conftest import new_company
from tests.integration.test_alerts import Sink, project_with

pytestmark = pytest.mark.integration

# The alert tests' fixtures: a sink on 127.0.0.1, and a secrets key with no broker (this process sends).
sink, alerts_env = test_alerts.sink, test_alerts.alerts_env

Counts = dict[tuple[str, str], float]


def alert_counts(http: httpx.Client) -> Counts:
    """firefeed_alert_attempts_total by (event, outcome), as the API's /metrics shows it."""
    found: Counts = {}
    for name, labels, value in metrics.iter_samples(http.get("/metrics").text):
        if name == "firefeed_alert_attempts_total":
            assert set(labels) == {"event", "outcome"}, labels  # no company, project or URL in a label
            found[(labels["event"], labels["outcome"])] = value
    return found


def test_a_project_s_alerts_list_event_time_host_status_and_attempts_but_no_url_path_secret_or_signature(
    alerts_env: Path, sink: Sink, tmp_path: Path, http: httpx.Client
) -> None:
    token_in_path = "T0-" + uuid.uuid4().hex
    hook = f"{sink.url}/{token_in_path}?key={token_in_path}"
    p = project_with(tmp_path, [{"url": hook, "secret": "ALERTS_KEY", "on": ["failed", "recovered"]}])
    auth = {"Authorization": f"Bearer {TokenStore().create(p.company)}"}
    sink.answers = [503]
    (p.folder / "items.csv").unlink()
    failed = p.run()
    assert failed["status"] == "FAILED"
    assert wait_batches(20)
    p.feed(["A1", "A2"])
    recovered = p.run()
    assert wait_batches(20)

    answer = http.get(f"/api/projects/{p.project}/alerts", headers=auth)

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["project"] == p.project
    newest, oldest = body["alerts"]
    port = sink.httpd.server_address[1]
    assert [(a["event"], a["run_id"], a["status"], a["attempts"]) for a in (oldest, newest)] == [
        ("failed", failed["run_id"], "delivered", 2),
        ("recovered", recovered["run_id"], "delivered", 1),
    ]
    assert {a["target_host"] for a in body["alerts"]} == {f"127.0.0.1:{port}"}
    assert oldest["last"]["status_code"] == 200 and oldest["last"]["error"] is None
    assert oldest["next_attempt_at"] is None and oldest["created_at"] <= oldest["last_attempt_at"]
    assert set(oldest) == {
        "id", "event", "run_id", "export", "target_host", "status", "attempts",
        "created_at", "last_attempt_at", "next_attempt_at", "last",
    }  # fmt: skip
    for hidden in (token_in_path, "/hook", p.secret, "ALERTS_KEY", "sha256=", '"body"'):
        assert hidden not in answer.text, hidden
    assert [r.path for r in sink.received] == [f"/hook/{token_in_path}?key={token_in_path}"] * 3

    one = http.get(f"/api/projects/{p.project}/alerts?limit=1", headers=auth).json()
    assert [a["event"] for a in one["alerts"]] == ["recovered"]
    for bad in ("0", "101", "x"):
        assert http.get(f"/api/projects/{p.project}/alerts?limit={bad}", headers=auth).status_code == 422


def test_a_redirect_to_the_hook_s_https_url_shows_its_host_never_its_path_or_query_in_the_listing_or_logs(
    alerts_env: Path, sink: Sink, tmp_path: Path, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = "T0-" + uuid.uuid4().hex
    hook = f"{sink.url}/{token}?key={token}"
    p = project_with(tmp_path, [{"url": hook, "secret": "ALERTS_KEY"}])
    auth = {"Authorization": f"Bearer {TokenStore().create(p.company)}"}
    # The receiver moved its hooks to https: the usual redirect names the same path, token and all.
    sink.location = hook.replace("http://", "https://")
    sink.answers = [301]
    (p.folder / "items.csv").unlink()
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)

    answer = http.get(f"/api/projects/{p.project}/alerts", headers=auth)

    assert answer.status_code == 200, answer.text
    (alert,) = answer.json()["alerts"]
    assert alert["status"] == "failed" and alert["last"]["status_code"] == 301
    assert "redirects are not followed" in alert["last"]["error"]
    assert "127.0.0.1" in alert["last"]["error"]
    assert token not in answer.text
    assert token not in caplog.text


def test_another_company_s_token_gets_the_unknown_project_s_404_and_no_token_a_401(
    alerts_env: Path, sink: Sink, tmp_path: Path, http: httpx.Client
) -> None:
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])
    (p.folder / "items.csv").unlink()
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)
    _other, other_auth = new_company()
    unknown = "p_" + uuid.uuid4().hex[:10]

    theirs = http.get(f"/api/projects/{p.project}/alerts", headers=other_auth)
    nobody_s = http.get(f"/api/projects/{unknown}/alerts", headers=other_auth)

    assert theirs.status_code == nobody_s.status_code == 404
    assert theirs.json() == {"error": "not_found", "message": f"unknown project {p.project!r}"}
    assert nobody_s.json() == {"error": "not_found", "message": f"unknown project {unknown!r}"}
    assert http.get(f"/api/projects/{p.project}/alerts").status_code == 401
    owner = {"Authorization": f"Bearer {TokenStore().create(p.company)}"}
    assert [a["event"] for a in http.get(f"/api/projects/{p.project}/alerts", headers=owner).json()["alerts"]] == [
        "failed"
    ]


def test_metrics_count_each_attempt_by_event_as_sent_failed_or_given_up(
    alerts_env: Path, sink: Sink, tmp_path: Path, http: httpx.Client
) -> None:
    before = alert_counts(http)
    assert set(before) == {(e.value, o) for e in AlertEvent for o in metrics.ALERT_OUTCOMES}  # all there, from 0
    p = project_with(tmp_path, [{"url": sink.url, "secret": "ALERTS_KEY"}])
    sink.answers = [500]  # failed: tried again, then sent
    (p.folder / "items.csv").unlink()
    assert p.run()["status"] == "FAILED"
    assert wait_batches(20)
    sink.answers = [404]  # a 4xx: given up at once
    p.feed(["A1", "A2"])
    assert p.run()["status"] == "SUCCEEDED"
    assert wait_batches(20)

    after = alert_counts(http)

    moved = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    assert moved == {("failed", "failed"): 1, ("failed", "sent"): 1, ("recovered", "given_up"): 1}
    page = http.get("/metrics").text
    assert p.company not in page and p.project not in page
    assert json.dumps(sink.events()) == '["failed", "failed", "recovered"]'
