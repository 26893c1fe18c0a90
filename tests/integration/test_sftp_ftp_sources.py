"""Sources on SFTP and FTP servers (SPEC 10 C6): real servers on 127.0.0.1, real runs.

An asyncssh SFTP server (password and public-key logins, a host key the test chooses) and a
pyftpdlib FTP server, each on a free port, each counting what it is asked, play the merchant's
file server. The company's secrets hold the credentials; no report, log line or message shows them.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import yaml
from sqlalchemy import text

from firefeed.config import reset_settings
from firefeed.errors import SpecError
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli, read_csv
from tests.integration.file_servers import CSV, USER, FTPServer, SFTPServer, company_with

pytestmark = pytest.mark.integration


def run_source(tmp_path: Path, company: str, source: dict[str, Any], project: str | None = None) -> dict[str, Any]:
    spec = {
        "company": company,
        "project": project or "p_" + uuid.uuid4().hex[:10],
        "sources": [{"name": "main", "format": "csv", **source}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = tmp_path / f"{spec['project']}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    _code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    return report


def fetched(report: dict[str, Any]) -> dict[str, Any]:
    source: dict[str, Any] = report["sources"][0]
    return source


def sftp_url(server: SFTPServer, path: str = "/out/feed.csv") -> str:
    return f"sftp://{USER}@127.0.0.1:{server.port}{path}"


def pinned_keys(engine: Any, company: str) -> list[tuple[str, int, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT host, port, fingerprint FROM host_keys WHERE company_id = :c"), {"c": company}
        ).all()
    return [(r.host, r.port, r.fingerprint) for r in rows]


def test_a_run_reads_a_csv_over_sftp_pins_the_key_and_skips_the_unchanged_file_next_time(
    transfer_env: Path, tmp_path: Path, engine: Any, sftp: SFTPServer
) -> None:
    company = company_with(SFTP_PW=sftp.password)
    project = "p_" + uuid.uuid4().hex[:10]
    source = {"url": sftp_url(sftp), "password": "${secret:SFTP_PW}"}

    first = run_source(tmp_path, company, source, project)
    assert first["status"] == "SUCCEEDED", first["error"]
    assert (fetched(first)["bytes"], fetched(first)["rows"], fetched(first)["not_modified"]) == (len(CSV), 2, False)
    assert read_csv(transfer_env / company / project / "out.csv")[1][0][:2] == ["A1", "Shoe"]
    fingerprint = str(sftp.host_key.get_fingerprint("sha256"))
    assert pinned_keys(engine, company) == [("127.0.0.1", sftp.port, fingerprint)]
    assert sftp.opens == 1

    second = run_source(tmp_path, company, source, project)
    assert second["status"] == "SUCCEEDED", second["error"]
    assert fetched(second)["not_modified"] is True
    assert sftp.opens == 1  # size and mtime unchanged: the file was not read again

    # A new file (other size and mtime) is downloaded again.
    (sftp.root / "out" / "feed.csv").write_bytes(CSV + b"A3,Clog,30\n")
    third = run_source(tmp_path, company, source, project)
    assert third["status"] == "SUCCEEDED", third["error"]
    assert (fetched(third)["not_modified"], fetched(third)["rows"], sftp.opens) == (False, 3, 2)


def test_a_run_reads_a_csv_over_ftp_and_skips_the_unchanged_file_next_time(
    transfer_env: Path, tmp_path: Path, ftp: tuple[FTPServer, str]
) -> None:
    server, password = ftp
    company = company_with(FTP_PW=password)
    project = "p_" + uuid.uuid4().hex[:10]
    source = {"url": f"ftp://{USER}@127.0.0.1:{server.port}/out/feed.csv", "password": "${secret:FTP_PW}"}

    first = run_source(tmp_path, company, source, project)
    assert first["status"] == "SUCCEEDED", first["error"]
    assert (fetched(first)["bytes"], fetched(first)["rows"], server.sent) == (len(CSV), 2, 1)

    second = run_source(tmp_path, company, source, project)
    assert second["status"] == "SUCCEEDED", second["error"]
    assert fetched(second)["not_modified"] is True
    assert server.sent == 1


def test_an_ftps_source_asks_for_tls_before_the_login_and_stops_when_the_server_has_none(
    transfer_env: Path, tmp_path: Path, ftp: tuple[FTPServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, password = ftp
    company = company_with(FTP_PW=password)
    caplog.set_level(logging.DEBUG)
    report = run_source(
        tmp_path,
        company,
        {"url": f"ftps://{USER}@127.0.0.1:{server.port}/out/feed.csv", "password": "${secret:FTP_PW}"},
    )
    assert report["status"] == "FAILED"
    assert "the server refused TLS (AUTH TLS)" in report["error"]["message"], report["error"]
    assert server.sent == 0
    assert password not in json.dumps(report) and password not in caplog.text


def test_a_private_key_in_a_secret_logs_in_and_is_never_shown(
    transfer_env: Path, tmp_path: Path, sftp: SFTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    sftp.authorized = key.convert_to_public()
    private = key.export_private_key("openssh").decode()
    # A secret holds one line: the key file goes in base64-encoded (`base64 -w0 KEYFILE`).
    company = company_with(SFTP_KEY=base64.b64encode(private.encode()).decode())
    caplog.set_level(logging.DEBUG)

    report = run_source(tmp_path, company, {"url": sftp_url(sftp), "private_key": "${secret:SFTP_KEY}"})

    assert report["status"] == "SUCCEEDED", report["error"]
    assert fetched(report)["rows"] == 2
    encoded = base64.b64encode(private.encode()).decode()
    for shown in (private.splitlines()[1], encoded[20:80]):
        assert shown not in json.dumps(report) and shown not in caplog.text


def test_a_wrong_password_fails_naming_user_and_host_but_not_the_password(
    transfer_env: Path, tmp_path: Path, sftp: SFTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-" + uuid.uuid4().hex
    company = company_with(SFTP_PW=wrong)
    caplog.set_level(logging.DEBUG)

    report = run_source(tmp_path, company, {"url": sftp_url(sftp), "password": "${secret:SFTP_PW}"})

    assert report["status"] == "FAILED"
    message = report["error"]["message"]
    assert f"refused the login of user '{USER}'" in message and f"127.0.0.1:{sftp.port}" in message, message
    assert wrong not in json.dumps(report) and wrong not in caplog.text
    assert sftp.opens == 0


def test_a_host_key_other_than_the_spec_s_fails_the_fetch_with_both_fingerprints(
    transfer_env: Path, tmp_path: Path, engine: Any, sftp: SFTPServer
) -> None:
    company = company_with(SFTP_PW=sftp.password)
    expected = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    line = f"[127.0.0.1]:{sftp.port} " + expected.export_public_key("openssh").decode().strip()
    source = {"url": sftp_url(sftp), "password": "${secret:SFTP_PW}", "host_key": line}

    report = run_source(tmp_path, company, source)

    assert report["status"] == "FAILED"
    message = report["error"]["message"]
    assert str(expected.get_fingerprint("sha256")) in message, message
    assert str(sftp.host_key.get_fingerprint("sha256")) in message, message
    assert "host_key" in message and sftp.opens == 0
    assert pinned_keys(engine, company) == []  # a spec's own key is never recorded

    right = f"[127.0.0.1]:{sftp.port} " + sftp.host_key.export_public_key("openssh").decode().strip()
    report = run_source(tmp_path, company, {**source, "host_key": right})
    assert report["status"] == "SUCCEEDED", report["error"]


def test_a_server_presenting_another_key_than_the_first_seen_fails_until_the_key_is_forgotten(
    transfer_env: Path, tmp_path: Path, engine: Any, sftp: SFTPServer
) -> None:
    company = company_with(SFTP_PW=sftp.password)
    project = "p_" + uuid.uuid4().hex[:10]
    source = {"url": sftp_url(sftp), "password": "${secret:SFTP_PW}"}
    assert run_source(tmp_path, company, source, project)["status"] == "SUCCEEDED"
    first = str(sftp.host_key.get_fingerprint("sha256"))

    # The same port, another server key (a rebuilt server, or someone in the middle).
    sftp.stop()
    sftp.start(asyncssh.generate_private_key("ssh-ed25519"))
    second = str(sftp.host_key.get_fingerprint("sha256"))
    report = run_source(tmp_path, company, source, project)

    assert report["status"] == "FAILED"
    message = report["error"]["message"]
    assert first in message and second in message, message
    forget = f"firefeed host-key forget {company} 127.0.0.1:{sftp.port}"
    assert forget in message
    assert pinned_keys(engine, company) == [("127.0.0.1", sftp.port, first)]

    code, out = cli("host-key", "list", company)
    assert code == 0 and first in out
    code, out = cli(*forget.split()[1:])
    assert code == 0, out
    assert run_source(tmp_path, company, source, project)["status"] == "SUCCEEDED"
    assert pinned_keys(engine, company) == [("127.0.0.1", sftp.port, second)]
    assert cli("host-key", "forget", company, "elsewhere.example:2222")[0] == 4


def test_a_host_that_resolves_to_a_refused_address_is_refused_before_connecting(
    transfer_env: Path, tmp_path: Path, sftp: SFTPServer, ftp: tuple[FTPServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FIREFEED_FETCH_ALLOWED_HOSTS")
    reset_settings()
    server, password = ftp
    company = company_with(SFTP_PW=sftp.password, FTP_PW=password)
    for url, secret in (
        (f"sftp://{USER}@localhost:{sftp.port}/out/feed.csv", "SFTP_PW"),
        (f"ftp://{USER}@localhost:{server.port}/out/feed.csv", "FTP_PW"),
    ):
        report = run_source(tmp_path, company, {"url": url, "password": f"${{secret:{secret}}}"})
        assert report["status"] == "FAILED"
        assert report["error"]["type"] == "UnsafeURLError", report["error"]
        assert "resolves to" in report["error"]["message"] and "loopback" in report["error"]["message"]
    assert sftp.connections == 0 and server.sent == 0


def test_the_size_cap_stops_an_sftp_and_an_ftp_download(
    transfer_env: Path,
    tmp_path: Path,
    sftp: SFTPServer,
    ftp: tuple[FTPServer, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIREFEED_FETCH_MAX_BYTES", str(len(CSV) - 1))
    reset_settings()
    server, password = ftp
    company = company_with(SFTP_PW=sftp.password, FTP_PW=password)
    for url, secret in (
        (sftp_url(sftp), "SFTP_PW"),
        (f"ftp://{USER}@127.0.0.1:{server.port}/out/feed.csv", "FTP_PW"),
    ):
        report = run_source(tmp_path, company, {"url": url, "password": f"${{secret:{secret}}}"})
        assert report["status"] == "FAILED"
        assert f"larger than the size cap of {len(CSV) - 1} bytes" in report["error"]["message"], report["error"]
    assert sftp.opens == 0 and server.sent == 0  # the sizes the servers told were enough


def test_file_server_keys_are_refused_where_they_mean_nothing_and_a_url_password_is_never_echoed() -> None:
    secret = "hunter-" + uuid.uuid4().hex

    def problem(source: dict[str, Any]) -> str:
        doc = {"company": "c", "project": "p", "sources": [{"name": "main", "format": "csv", **source}]}
        doc["exports"] = [{"name": "csv", "format": "csv", "path": "out.csv"}]
        with pytest.raises(SpecError) as err:
            parse_spec(doc)
        return str(err.value)

    said = problem({"url": f"sftp://u:{secret}@h.example/f.csv"})
    assert "the URL holds a password" in said and "${secret:NAME}" in said and secret not in said
    assert "must name a company secret" in problem({"url": "sftp://u@h.example/f.csv", "password": secret})
    assert secret not in problem({"url": "sftp://u@h.example/f.csv", "password": secret})
    assert "only an sftp:// source takes private_key" in problem(
        {"url": "ftp://u@h.example/f.csv", "private_key": "${secret:K}"}
    )
    assert "only an sftp://, ftp:// or ftps:// source" in problem(
        {"url": "https://h.example/f.csv", "password": "${secret:P}"}
    )
    assert "sends no HTTP headers" in problem({"url": "sftp://u@h.example/f.csv", "headers": {"X-A": "b"}})
    assert "is not a known_hosts line" in problem({"url": "sftp://u@h.example/f.csv", "host_key": "nonsense"})
    assert "must name a file" in problem({"url": "sftp://u@h.example/"})


def test_a_fetch_already_past_its_deadline_fails_saying_so_without_downloading(
    transfer_env: Path, tmp_path: Path, ftp: tuple[FTPServer, str]
) -> None:
    from firefeed.config import get_settings
    from firefeed.errors import FetchError
    from firefeed.pipeline.fetch import fetch_source
    from firefeed.secrets.references import Resolver, SpecOrigin

    server, password = ftp
    url = f"ftp://{USER}@127.0.0.1:{server.port}/out/feed.csv"
    refs = Resolver(company="c", origin=SpecOrigin.REMOTE, secret=lambda name: password)
    started = time.monotonic()
    with pytest.raises(FetchError, match="deadline"):
        fetch_source(
            source="main",
            url=url,
            dest_dir=tmp_path / "d",
            base_dir=None,
            headers=None,
            previous=None,
            settings=get_settings(),
            deadline=time.monotonic() - 1,
            references=refs,
        )
    assert time.monotonic() - started < 5 and server.sent == 0


def test_a_lookup_table_on_an_sftp_server_is_fetched_like_a_source(
    transfer_env: Path, tmp_path: Path, sftp: SFTPServer
) -> None:
    (sftp.root / "out" / "labels.csv").write_bytes(b"id,label\nA1,shoes\n")
    (tmp_path / "main.csv").write_bytes(CSV)
    company = company_with(SFTP_PW=sftp.password)
    project = "p_" + uuid.uuid4().hex[:10]
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [
            {
                "name": "labels",
                "url": sftp_url(sftp, "/out/labels.csv"),
                "password": "${secret:SFTP_PW}",
                "key": "id",
            }
        ],
        "rules": [{"name": "label", "then": [{"lookup": "labels", "match": "id", "set": {"custom_label_0": "label"}}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    code, out = cli("run", str(path), "--json")
    assert code == 0, out
    header, body = read_csv(transfer_env / company / project / "out.csv")
    assert [row[header.index("custom_label_0")] for row in body] == ["shoes", ""]
    assert sftp.opens == 1


def test_a_password_naming_a_secret_the_company_lacks_is_refused_when_applied_naming_the_key(
    transfer_env: Path, tmp_path: Path, sftp: SFTPServer
) -> None:
    company = company_with(SFTP_PW=sftp.password)
    spec = {
        "company": company,
        "project": "p_" + uuid.uuid4().hex[:10],
        "sources": [{"name": "main", "format": "csv", "url": sftp_url(sftp), "password": "${secret:SFTP_PV}"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    code, _out = cli("apply", str(path))
    assert code == 2
    assert sftp.connections == 0
    from firefeed.config import get_settings
    from firefeed.spec.server_checks import check_server_side

    with pytest.raises(SpecError, match=r"sources\[0\]\.password: company .* has no secret 'SFTP_PV'"):
        check_server_side(parse_spec(spec), tmp_path, get_settings(), lambda c: ["SFTP_PW"])


def test_an_ftps_source_is_read_over_tls_from_a_server_whose_certificate_the_worker_trusts(
    transfer_env: Path, tmp_path: Path, trusted_cert: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ftps"
    (root / "out").mkdir(parents=True)
    (root / "out" / "feed.csv").write_bytes(CSV)
    password = "pw-" + uuid.uuid4().hex
    server = FTPServer(root, password, tls=trusted_cert)
    caplog.set_level(logging.DEBUG)
    try:
        company = company_with(FTP_PW=password)
        url = f"ftps://{USER}@127.0.0.1:{server.port}/out/feed.csv"
        report = run_source(tmp_path, company, {"url": url, "password": "${secret:FTP_PW}"})
        assert report["status"] == "SUCCEEDED", report["error"]
        assert (fetched(report)["rows"], server.sent) == (2, 1)
        assert password not in json.dumps(report) and password not in caplog.text

        # The same server, its certificate no longer trusted: refused before the login.
        from firefeed.pipeline._netguard import tls_context

        os.environ.pop("SSL_CERT_FILE")
        tls_context.cache_clear()
        refused = run_source(tmp_path, company, {"url": url, "password": "${secret:FTP_PW}"})
        assert refused["status"] == "FAILED"
        assert "the server's certificate" in refused["error"]["message"], refused["error"]
        assert server.sent == 1
    finally:
        server.close()
