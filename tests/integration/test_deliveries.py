"""Delivery targets (SPEC 10 C7): real SFTP, FTPS and HTTPS servers on 127.0.0.1, real runs.

Each run that publishes hands the file to the export's targets; a target that already holds the
file's sha256 is `unchanged`; a failed target leaves the run SUCCEEDED with a `delivery_failed`
warning and an alert, and `firefeed deliver` retries it. Uploads go to a temporary name, then a
rename. No secret shows in a report, a log line or an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import ssl
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import yaml
from sqlalchemy import text

from firefeed.config import reset_settings
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli
from tests.integration.file_servers import USER, FTPServer, SFTPServer, company_with

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- an HTTPS PUT sink


class PutSink:
    """An HTTPS server on 127.0.0.1 keeping each PUT's path, headers and body; answers `status`."""

    def __init__(self, cert: tuple[Path, Path]) -> None:
        outer = self
        self.puts: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 201

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.puts.append((self.path, dict(self.headers.items()), body))
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert[0]), str(cert[1]))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture()
def sink(trusted_cert: tuple[Path, Path]) -> Iterator[PutSink]:
    server = PutSink(trusted_cert)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def ftps(tmp_path: Path, trusted_cert: tuple[Path, Path]) -> Iterator[tuple[FTPServer, str]]:
    root = tmp_path / "ftps"
    (root / "in").mkdir(parents=True)
    password = "ftp-" + uuid.uuid4().hex
    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    server = FTPServer(root, password, perm="elradfmw", tls=trusted_cert)
    try:
        yield server, password
    finally:
        server.close()


# ---------------------------------------------------------------- runs


def run_project(
    tmp_path: Path,
    company: str,
    project: str,
    deliver: list[dict[str, Any]],
    rows: int = 3,
    alerts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    feed = tmp_path / f"{project}-feed.csv"
    feed.write_text("id,title\n" + "".join(f"A{i},Item {i}\n" for i in range(rows)), encoding="utf-8")
    spec: dict[str, Any] = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": str(feed), "format": "csv"}],
        "exports": [{"name": "feed", "format": "csv", "path": "feed.csv", "deliver": deliver}],
    }
    if alerts:
        spec["alerts"] = alerts
    path = tmp_path / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    _code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    return report


def deliveries(report: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = report["exports"][0].get("deliveries", [])
    return found


def read(path: Path) -> bytes:
    return path.read_bytes()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


@pytest.fixture()
def sftp_in(sftp: SFTPServer) -> SFTPServer:
    (sftp.root / "in").mkdir()
    sftp.authorized = None
    return sftp


def test_a_run_delivers_to_sftp_ftps_and_https_and_the_next_run_finds_the_targets_unchanged(
    transfer_env: Path,
    tmp_path: Path,
    sftp_in: SFTPServer,
    ftps: tuple[FTPServer, str],
    sink: PutSink,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ftp_server, ftp_password = ftps
    token = "tok-" + uuid.uuid4().hex
    company = company_with(SFTP_PW=sftp_in.password, FTP_PW=ftp_password, PUT_TOKEN=token)
    project = "p_" + uuid.uuid4().hex[:10]
    targets = [
        {"url": f"sftp://{USER}@127.0.0.1:{sftp_in.port}/in/feed.csv", "password": "${secret:SFTP_PW}"},
        {"url": f"ftps://{USER}@127.0.0.1:{ftp_server.port}/in/feed.csv", "password": "${secret:FTP_PW}"},
        {
            "url": f"https://127.0.0.1:{sink.port}/upload/feed.csv",
            "method": "PUT",
            "headers": {"Authorization": "Bearer ${secret:PUT_TOKEN}"},
        },
    ]
    caplog.set_level(logging.DEBUG)

    first = run_project(tmp_path, company, project, targets)

    assert first["status"] == "SUCCEEDED", first["error"]
    published = (transfer_env / company / project / "feed.csv").read_bytes()
    assert [(d["status"], d["bytes"], d["attempts"], d["error"]) for d in deliveries(first)] == [
        ("delivered", len(published), 1, None)
    ] * 3
    assert [d["target"] for d in deliveries(first)] == [t["url"] for t in targets]
    assert (sftp_in.root / "in" / "feed.csv").read_bytes() == published
    assert (ftp_server_root := tmp_path / "ftps" / "in" / "feed.csv").read_bytes() == published
    assert [(path, headers["Authorization"], body) for path, headers, body in sink.puts] == [
        ("/upload/feed.csv", f"Bearer {token}", published)
    ]
    assert leftovers(sftp_in.root / "in") == [] and leftovers(ftp_server_root.parent) == []
    assert not [w for w in first["warnings"] if "delivery_failed" in w]

    second = run_project(tmp_path, company, project, targets)
    assert second["status"] == "SUCCEEDED", second["error"]
    assert [(d["status"], d["bytes"]) for d in deliveries(second)] == [("unchanged", 0)] * 3
    assert (len(sink.puts), ftp_server.received) == (1, 1)

    third = run_project(tmp_path, company, project, targets, rows=5)
    assert [d["status"] for d in deliveries(third)] == ["delivered"] * 3
    assert (sftp_in.root / "in" / "feed.csv").read_bytes() == (
        transfer_env / company / project / "feed.csv"
    ).read_bytes()
    assert (len(sink.puts), ftp_server.received) == (2, 2)

    for secret in (sftp_in.password, ftp_password, token):
        for report in (first, second, third):
            assert secret not in json.dumps(report)
        assert secret not in caplog.text


def test_a_plain_ftp_target_gets_the_file_under_a_temporary_name_then_renamed(
    transfer_env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ftp"
    (root / "in").mkdir(parents=True)
    password = "ftp-" + uuid.uuid4().hex
    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    server = FTPServer(root, password, perm="elradfmw")
    try:
        company = company_with(FTP_PW=password)
        project = "p_" + uuid.uuid4().hex[:10]
        target = {"url": f"ftp://{USER}@127.0.0.1:{server.port}/in/feed.csv", "password": "${secret:FTP_PW}"}
        caplog.set_level(logging.DEBUG)

        report = run_project(tmp_path, company, project, [target], rows=4)

        assert report["status"] == "SUCCEEDED", report["error"]
        published = (transfer_env / company / project / "feed.csv").read_bytes()
        assert [(d["status"], d["bytes"]) for d in deliveries(report)] == [("delivered", len(published))]
        assert (root / "in" / "feed.csv").read_bytes() == published
        assert leftovers(root / "in") == [] and server.received == 1
        assert password not in json.dumps(report) and password not in caplog.text
    finally:
        server.close()


def test_a_failed_delivery_leaves_the_run_succeeded_with_a_warning_and_an_alert_and_firefeed_deliver_retries_it(
    transfer_env: Path,
    tmp_path: Path,
    sftp_in: SFTPServer,
    engine: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIREFEED_ALERT_BATCH_WAIT_S", "0")  # one try at the alert, then the process goes on
    reset_settings()
    wrong = "wrong-" + uuid.uuid4().hex
    company = company_with(SFTP_PW=wrong, ALERTS_KEY="k-" + uuid.uuid4().hex)
    project = "p_" + uuid.uuid4().hex[:10]
    url = f"sftp://{USER}@127.0.0.1:{sftp_in.port}/in/feed.csv"
    alerts = [{"url": "https://127.0.0.1:9/hook", "on": ["delivery_failed"], "secret": "ALERTS_KEY"}]
    caplog.set_level(logging.DEBUG)

    report = run_project(tmp_path, company, project, [{"url": url, "password": "${secret:SFTP_PW}"}], alerts=alerts)

    assert report["status"] == "SUCCEEDED", report["error"]
    assert (transfer_env / company / project / "feed.csv").exists()  # published all the same
    (failed,) = deliveries(report)
    assert (failed["status"], failed["target"], failed["bytes"]) == ("failed", url, 0)
    assert f"refused the login of user '{USER}'" in failed["error"], failed
    assert [w for w in report["warnings"] if w.startswith("delivery_failed")], report["warnings"]
    with engine.connect() as conn:
        events = conn.execute(
            text("SELECT event, export FROM alert_deliveries WHERE run_id = CAST(:r AS uuid)"), {"r": report["run_id"]}
        ).all()
    assert [(e.event, e.export) for e in events] == [("delivery_failed", "feed")]
    assert not (sftp_in.root / "in" / "feed.csv").exists()

    SecretStore().set(company, "SFTP_PW", sftp_in.password)
    code, out = cli("deliver", project, "--json")
    assert code == 0, out
    (retried,) = json.loads(out)
    assert (retried["export"], retried["target"], retried["status"]) == ("feed", url, "delivered")
    assert (sftp_in.root / "in" / "feed.csv").read_bytes() == (
        transfer_env / company / project / "feed.csv"
    ).read_bytes()
    _code, status = cli("status", report["run_id"], "--json")
    assert [d["status"] for d in deliveries(json.loads(status))] == ["delivered"]

    # Delivered: a second `firefeed deliver` sends nothing again.
    opens = sftp_in.opens
    code, out = cli("deliver", project, "feed", "--json")
    assert (code, [d["status"] for d in json.loads(out)], sftp_in.opens) == (0, ["delivered"], opens)
    for secret in (wrong, sftp_in.password):
        assert secret not in json.dumps(report) and secret not in out and secret not in caplog.text


def test_a_server_presenting_another_host_key_than_the_target_s_gets_nothing(
    transfer_env: Path, tmp_path: Path, sftp_in: SFTPServer
) -> None:
    company = company_with(SFTP_PW=sftp_in.password)
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()
    target = {
        "url": f"sftp://{USER}@127.0.0.1:{sftp_in.port}/in/feed.csv",
        "password": "${secret:SFTP_PW}",
        "host_key": f"[127.0.0.1]:{sftp_in.port} {other}",
    }

    report = run_project(tmp_path, company, "p_" + uuid.uuid4().hex[:10], [target])

    assert report["status"] == "SUCCEEDED", report["error"]
    (failed,) = deliveries(report)
    assert failed["status"] == "failed" and "host key of 127.0.0.1" in failed["error"], failed
    assert str(sftp_in.host_key.get_fingerprint("sha256")) in failed["error"]
    assert sftp_in.opens == 0 and list((sftp_in.root / "in").iterdir()) == []


def test_a_reader_of_the_target_sees_the_old_file_or_the_new_one_whole_and_a_killed_attempt_s_leftover_goes(
    transfer_env: Path, tmp_path: Path, sftp_in: SFTPServer
) -> None:
    from firefeed.config import get_settings
    from firefeed.pipeline.transfer import RemoteAccess
    from firefeed.pipeline.transfer.upload import temp_name, upload_remote
    from firefeed.secrets.references import Resolver, SpecOrigin

    folder = sftp_in.root / "in"
    old = b"old feed\n" * 1000
    (folder / "feed.xml").write_bytes(old)
    leftover = folder / temp_name("/in/feed.xml", "77", "1-1")  # what a killed attempt of this delivery left
    leftover.write_bytes(b"half")
    new = tmp_path / "new.xml"
    new.write_bytes(hashlib.sha256(b"x").digest() * 1_000_000)  # 32 MB
    wanted = {hashlib.sha256(old).hexdigest(), hashlib.sha256(new.read_bytes()).hexdigest()}
    seen: set[str] = set()
    temps: set[str] = set()
    done = threading.Event()

    def read_while_uploading() -> None:
        while not done.is_set():
            seen.add(hashlib.sha256((folder / "feed.xml").read_bytes()).hexdigest())
            temps.update(p.name for p in folder.iterdir() if p.name.endswith(".part") and p != leftover)

    reader = threading.Thread(target=read_while_uploading)
    reader.start()
    try:
        upload_remote(
            label="feed",
            url=f"sftp://{USER}@127.0.0.1:{sftp_in.port}/in/feed.xml",
            access=RemoteAccess(password="${secret:PW}"),
            references=Resolver(company="c", origin=SpecOrigin.REMOTE, secret=lambda name: sftp_in.password),
            local=new,
            tag="77",
            attempt_no="2-1",
            settings=get_settings(),
            host_keys=None,
        )
    finally:
        done.set()
        reader.join(10)

    assert (folder / "feed.xml").read_bytes() == new.read_bytes()
    assert seen <= wanted and len(seen) >= 1, "a reader saw a partial file"
    assert temps == {temp_name("/in/feed.xml", "77", "2-1")}  # the upload went to its own temporary name
    assert leftovers(folder) == []  # and the killed attempt's leftover is gone


def test_targets_are_checked_when_the_spec_is_read_and_no_message_echoes_a_password() -> None:
    def problem(target: dict[str, Any]) -> str:
        spec = {
            "company": "c",
            "project": "p",
            "sources": [{"name": "m", "url": "feed.csv"}],
            "exports": [{"name": "e", "format": "csv", "path": "e.csv", "deliver": [target]}],
        }
        with pytest.raises(Exception) as caught:
            parse_spec(spec)
        return str(caught.value)

    assert "holds a password" in problem({"url": "sftp://u:hunter2@files.example.com/in/e.csv"})
    assert "hunter2" not in problem({"url": "sftp://u:hunter2@files.example.com/in/e.csv"})
    assert "plain http is refused" in problem({"url": "http://files.example.com/e.csv"})
    assert "never hold the value" in problem({"url": "ftps://u@files.example.com/e.csv", "password": "hunter2"})
    assert "no user or password" in problem({"url": "https://u:hunter2@files.example.com/e.csv"})
    assert "can't be set" in problem({"url": "https://files.example.com/e.csv", "headers": {"Host": "x"}})
    assert "private_key" in problem({"url": "https://files.example.com/e.csv", "private_key": "${secret:K}"})


def test_a_target_naming_a_secret_the_company_lacks_is_refused_when_applied_naming_its_key(
    transfer_env: Path, tmp_path: Path
) -> None:
    from firefeed.config import get_settings
    from firefeed.errors import SpecError
    from firefeed.spec.server_checks import check_server_side

    feed = tmp_path / "feed.csv"
    feed.write_text("id,title\nA1,Shoe\n", encoding="utf-8")
    spec = {
        "company": company_with(SFTP_PW="x"),
        "project": "p_" + uuid.uuid4().hex[:10],
        "sources": [{"name": "main", "url": str(feed)}],
        "exports": [
            {
                "name": "e",
                "format": "csv",
                "path": "e.csv",
                "deliver": [
                    {"url": "sftp://u@files.example.com/in/e.csv", "password": "${secret:SFTP_PV}"},
                    {"url": "https://files.example.com/e.csv", "headers": {"Authorization": "Bearer ${secret:TOK}"}},
                ],
            }
        ],
    }
    with pytest.raises(SpecError) as caught:
        check_server_side(parse_spec(spec), tmp_path, get_settings(), lambda c: ["SFTP_PW"])
    message = str(caught.value)
    assert "exports[0].deliver[0].password: company" in message and "'SFTP_PV'" in message, message
    assert "exports[0].deliver[1].headers.Authorization: company" in message and "'TOK'" in message, message
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert cli("apply", str(path))[0] == 2


def test_the_fetcher_s_host_rules_keep_a_delivery_from_a_loopback_target_the_operator_did_not_allow(
    transfer_env: Path, tmp_path: Path, sftp_in: SFTPServer, sink: PutSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FIREFEED_FETCH_ALLOWED_HOSTS")
    reset_settings()
    company = company_with(SFTP_PW=sftp_in.password)
    targets = [
        {"url": f"sftp://{USER}@127.0.0.1:{sftp_in.port}/in/feed.csv", "password": "${secret:SFTP_PW}"},
        {"url": f"https://127.0.0.1:{sink.port}/upload/feed.csv"},
    ]

    report = run_project(tmp_path, company, "p_" + uuid.uuid4().hex[:10], targets)

    assert report["status"] == "SUCCEEDED", report["error"]
    assert [d["status"] for d in deliveries(report)] == ["failed", "failed"]
    assert all("127.0.0.1" in d["error"] for d in deliveries(report)), deliveries(report)
    assert (sftp_in.connections, sink.puts) == (0, [])
