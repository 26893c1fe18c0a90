"""Feed URLs (SPEC 10 C4-C5): an export's last published file at `/feeds/{feed_id}/{file name}`.

One real API (uvicorn in a thread) and one export folder for the module; every test runs its own
project through `firefeed run` and fetches its feeds over HTTP.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import socket
import time
import uuid
from collections.abc import Iterator
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from firefeed.config import reset_settings
from tests.integration.conftest import cli, eventually, filler, new_company, write_csv

pytestmark = pytest.mark.integration

PASSWORD = "s3cr3t-feed-pa55word-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def env(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from firefeed.secrets.crypto import generate_key

    root = tmp_path_factory.mktemp("feeds")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREFEED_EXPORT_DIR", str(root / "exports"))
        mp.setenv("FIREFEED_DATA_DIR", str(root / "var"))
        mp.setenv("FIREFEED_SECRETS_KEY", generate_key())
        mp.delenv("FIREFEED_STORAGE_URL", raising=False)
        mp.delenv("FIREFEED_PUBLIC_URL", raising=False)
        reset_settings()
        yield root / "exports"
    reset_settings()


@pytest.fixture(scope="module")
def api(env: Path) -> Iterator[str]:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    with ServerThread(create_app()) as url:
        yield url


@pytest.fixture()
def http(api: str) -> Iterator[httpx.Client]:
    # httpx asks for gzip by default; these tests ask for it where they mean to.
    with httpx.Client(base_url=api, timeout=30, headers={"Accept-Encoding": "identity"}) as client:
        yield client


class Project:
    def __init__(self, folder: Path, exports: list[dict[str, Any]], items: int = 30, width: int = 0) -> None:
        self.company, self.headers = new_company("feed_")
        self.project = "p_" + uuid.uuid4().hex[:10]
        self.folder = folder
        self.items, self.width = items, width
        self.spec = folder / "spec.yaml"
        doc = {
            "company": self.company,
            "project": self.project,
            "sources": [{"name": "main", "url": "main.csv"}],
            "exports": exports,
        }
        self.spec.write_text(yaml.safe_dump(doc))
        self.write(1)

    def write(self, version: int) -> None:
        rows = [
            [
                f"A{i}",
                f"Shoe {i} v{version} {filler(i, self.width) if self.width else ''}".strip(),
                f"{i + version}.50 EUR",
                f"https://shop.example.com/a{i}",
            ]
            for i in range(1, self.items + 1)
        ]
        write_csv(self.folder / "main.csv", ["id", "title", "price", "link"], rows)

    def run(self, *flags: str) -> dict[str, Any]:
        code, out = cli("run", str(self.spec), "--json", *flags)
        assert code == 0, out
        return dict(json.loads(out))

    def urls(self, http: httpx.Client) -> dict[str, str]:
        r = http.get(f"/api/projects/{self.project}/feed-urls", headers=self.headers)
        assert r.status_code == 200, r.text
        return {f["export"]: f["url"] for f in r.json()["feed_urls"]}


GOOGLE = {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"}
CSV = {"name": "csv", "format": "csv", "path": "sub/feed.csv"}


@pytest.fixture()
def published(env: Path, tmp_path: Path) -> Project:
    p = Project(tmp_path, [GOOGLE, CSV])
    p.run()
    return p


def _file(env: Path, p: Project, path: str) -> bytes:
    return (env / p.company / p.project / path).read_bytes()


def test_a_feed_url_serves_the_published_file_with_its_type_length_etag_and_publish_time(
    env: Path, http: httpx.Client, published: Project
) -> None:
    urls = published.urls(http)
    assert urls["google"].startswith("/feeds/") and urls["google"].endswith("/google.xml")
    assert urls["csv"].endswith("/feed.csv")
    body = _file(env, published, "google.xml")
    r = http.get(urls["google"])  # no token
    assert r.status_code == 200
    assert r.content == body
    assert r.headers["content-type"] == "application/xml"
    assert r.headers["content-length"] == str(len(body))
    assert r.headers["etag"] == f'"{hashlib.sha256(body).hexdigest()}"'
    time.sleep(1.1)  # HTTP dates have whole seconds
    first = parsedate_to_datetime(r.headers["last-modified"])
    # An unchanged refresh publishes nothing (SPEC 11 I2): the file and its publish time stay.
    assert published.run()["incremental"]["mode"] == "unchanged"
    assert parsedate_to_datetime(http.get(urls["google"]).headers["last-modified"]) == first
    report = published.run("--full")  # a full run publishes the same bytes again: same ETag, a later time
    assert eventually(lambda: parsedate_to_datetime(http.get(urls["google"]).headers["last-modified"]) > first, 5)
    entry = next(e for e in report["exports"] if e["name"] == "google")
    assert http.get(urls["google"]).headers["etag"] == f'"{entry["sha256"]}"'
    r = http.get(urls["csv"])
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert r.content == _file(env, published, "sub/feed.csv")


def test_a_matching_if_none_match_or_a_not_older_if_modified_since_answers_304(
    http: httpx.Client, published: Project
) -> None:
    url = published.urls(http)["google"]
    r = http.get(url)
    etag, modified = r.headers["etag"], r.headers["last-modified"]
    assert http.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert http.get(url, headers={"If-None-Match": f'"nope", W/{etag}'}).status_code == 304
    assert http.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    assert http.get(url, headers={"If-Modified-Since": modified}).status_code == 304
    later = format_datetime(parsedate_to_datetime(modified).replace(year=2100), usegmt=True)
    assert http.get(url, headers={"If-Modified-Since": later}).status_code == 304
    earlier = format_datetime(parsedate_to_datetime(modified).replace(year=2000), usegmt=True)
    older = http.get(url, headers={"If-Modified-Since": earlier})
    assert older.status_code == 200 and older.content == r.content
    not_modified = http.get(url, headers={"If-None-Match": etag})
    assert not_modified.headers["etag"] == etag and not_modified.content == b""


def test_a_range_answers_206_with_those_bytes_and_an_unsatisfiable_one_416(
    env: Path, http: httpx.Client, published: Project
) -> None:
    url = published.urls(http)["google"]
    body = _file(env, published, "google.xml")
    r = http.get(url, headers={"Range": "bytes=10-29"})
    assert r.status_code == 206
    assert r.content == body[10:30]
    assert r.headers["content-range"] == f"bytes 10-29/{len(body)}"
    assert r.headers["content-length"] == "20"
    tail = http.get(url, headers={"Range": "bytes=-7"})
    assert tail.status_code == 206 and tail.content == body[-7:]
    rest = http.get(url, headers={"Range": f"bytes={len(body) - 3}-"})
    assert rest.status_code == 206 and rest.content == body[-3:]
    beyond = http.get(url, headers={"Range": f"bytes={len(body)}-"})
    assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{len(body)}"


def test_a_client_accepting_gzip_gets_the_body_compressed_and_head_gets_the_headers_alone(
    env: Path, http: httpx.Client, published: Project
) -> None:
    url = published.urls(http)["google"]
    body = _file(env, published, "google.xml")
    with http.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as r:
        raw = b"".join(r.iter_raw())
        assert r.status_code == 200
        assert r.headers["content-encoding"] == "gzip"
        assert "content-length" not in r.headers
        assert r.headers["vary"] == "Accept-Encoding"
    assert gzip.decompress(raw) == body
    plain = http.get(url, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == body
    head = http.head(url, headers={"Accept-Encoding": "identity"})
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(body))
    assert head.headers["etag"] == plain.headers["etag"]
    assert http.head(url, headers={"Accept-Encoding": "gzip"}).headers["content-encoding"] == "gzip"


def test_a_gzip_export_is_served_as_is_with_its_own_type(env: Path, http: httpx.Client, tmp_path: Path) -> None:
    p = Project(tmp_path, [{**CSV, "gzip": True}])
    p.run()
    url = p.urls(http)["csv"]
    assert url.endswith("/feed.csv.gz")
    r = http.get(url, headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-type"] == "application/gzip"
    assert "content-encoding" not in r.headers
    assert r.content == _file(env, p, "sub/feed.csv.gz")


def test_an_unknown_id_an_unknown_file_name_and_an_unpublished_export_answer_the_same_404(
    http: httpx.Client, published: Project, tmp_path: Path
) -> None:
    url = published.urls(http)["google"]
    feed_id = url.split("/")[2]
    fresh = Project(tmp_path / "fresh" if (tmp_path / "fresh").mkdir() is None else tmp_path, [GOOGLE])
    assert cli("apply", str(fresh.spec))[0] == 0
    unpublished = fresh.urls(http)["google"]
    answers = [
        http.get(f"/feeds/{uuid.uuid4().hex}/google.xml"),
        http.get(f"/feeds/{feed_id}/other.xml"),
        http.get(f"/feeds/{feed_id}/google.xml/more"),
        http.get(unpublished),
        http.get("/feeds/"),
    ]
    assert {a.status_code for a in answers} == {404}
    assert len({a.content for a in answers}) == 1
    assert answers[0].json() == {"error": "not_found", "message": "no such feed"}
    assert http.head(unpublished).status_code == 404


def test_feed_auth_asks_for_the_secret_password_and_never_shows_it(
    env: Path, http: httpx.Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from firefeed.secrets.store import SecretStore

    caplog.set_level(logging.DEBUG)
    auth = {"username": "merchant", "password": "${secret:FEED_PASSWORD}"}
    p = Project(tmp_path, [{**GOOGLE, "feed_auth": auth}])
    SecretStore().set(p.company, "FEED_PASSWORD", PASSWORD)
    report = p.run()
    url = p.urls(http)["google"]
    missing = http.get(url)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Basic ")
    assert http.get(url, auth=("merchant", "wrong")).status_code == 401
    assert http.get(url, auth=("someone", PASSWORD)).status_code == 401
    garbled = {"Authorization": "Basic " + base64.b64encode(b"no-colon").decode()}
    assert http.get(url, headers=garbled).status_code == 401
    ok = http.get(url, auth=("merchant", PASSWORD))
    assert ok.status_code == 200 and ok.content == _file(env, p, "google.xml")
    run_report = http.get(f"/api/runs/{report['run_id']}", headers=p.headers)
    shown = [
        json.dumps(report),
        run_report.text,
        http.get(f"/api/projects/{p.project}", headers=p.headers).text,
        cli("feed-url", p.project, "--json")[1],
        missing.text,
        caplog.text,
    ]
    assert all(PASSWORD not in text for text in shown)


def test_a_feed_auth_secret_the_company_lacks_is_refused_when_applied_naming_its_key(tmp_path: Path) -> None:
    from firefeed.secrets.store import SecretStore

    auth = {"username": "merchant", "password": "${secret:FEED_PASWORD}"}
    p = Project(tmp_path, [{**GOOGLE, "feed_auth": auth}])
    SecretStore().set(p.company, "FEED_PASSWORD", PASSWORD)
    code, out = cli("run", str(p.spec), "--json")
    assert code == 2, out
    assert "exports[0].feed_auth.password" in out
    assert "has no secret 'FEED_PASWORD' (did you mean 'FEED_PASSWORD'?)" in out
    assert PASSWORD not in out


def test_rotating_a_feed_url_makes_the_old_one_404_at_once(http: httpx.Client, published: Project) -> None:
    old = published.urls(http)["google"]
    assert http.get(old).status_code == 200
    r = http.post(f"/api/projects/{published.project}/exports/google/feed-url/rotate", headers=published.headers)
    assert r.status_code == 200
    new = r.json()["url"]
    assert new != old and new.endswith("/google.xml")
    assert http.get(old).status_code == 404
    assert http.get(new).status_code == 200
    assert published.urls(http)["google"] == new
    # From the CLI (another process, as far as the API knows): within the refresh interval.
    code, _ = cli("feed-url", "rotate", published.project, "google")
    assert code == 0
    assert eventually(lambda: http.get(new).status_code == 404, 3)
    assert http.get(published.urls(http)["google"]).status_code == 200
    other = http.post(f"/api/projects/{published.project}/exports/nope/feed-url/rotate", headers=published.headers)
    assert other.status_code == 404
    stranger = new_company("feed_")[1]
    assert (
        http.post(f"/api/projects/{published.project}/exports/google/feed-url/rotate", headers=stranger).status_code
        == 404
    )


def test_the_cli_prints_paths_or_urls_under_the_public_url(
    http: httpx.Client, published: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = published.urls(http)
    code, out = cli("feed-url", published.project)
    assert code == 0
    assert out.splitlines() == [f"google\t{urls['google']}", f"csv\t{urls['csv']}"]
    assert cli("feed-url", published.project, "csv") == (0, urls["csv"] + "\n")
    monkeypatch.setenv("FIREFEED_PUBLIC_URL", "https://feeds.shop.example.com/")
    reset_settings()
    try:
        code, out = cli("feed-url", published.project, "google")
        assert out == "https://feeds.shop.example.com" + urls["google"] + "\n"
    finally:
        monkeypatch.delenv("FIREFEED_PUBLIC_URL")
        reset_settings()
    assert cli("feed-url", "no_such_project")[0] == 1
    assert cli("feed-url", published.project, "nope")[0] == 1


def test_the_project_and_the_run_report_list_each_export_url_and_its_last_fetch(
    http: httpx.Client, published: Project
) -> None:
    project = http.get(f"/api/projects/{published.project}", headers=published.headers).json()
    listed = {f["export"]: f for f in project["feed_urls"]}
    assert set(listed) == {"google", "csv"}
    url = listed["google"]["url"]
    assert http.get(url, headers={"User-Agent": "Googlebot-Test/2.1"}).status_code == 200

    def fetched() -> bool:
        f = {
            f["export"]: f
            for f in http.get(f"/api/projects/{published.project}", headers=published.headers).json()["feed_urls"]
        }
        last = f["google"]["last_fetch"]
        return bool(last and last["user_agent"] == "Googlebot-Test/2.1" and last["status"] == 200)

    assert eventually(fetched, 6)
    runs = http.get(f"/api/projects/{published.project}/pipeline/runs", headers=published.headers).json()["runs"]
    report = http.get(f"/api/runs/{runs[0]['run_id']}", headers=published.headers).json()
    entry = next(e for e in report["exports"] if e["name"] == "google")
    assert entry["url"] == url
    assert entry["last_fetch"]["user_agent"] == "Googlebot-Test/2.1"


def test_fetches_are_counted_in_metrics_by_export_and_status_class(http: httpx.Client, published: Project) -> None:
    url = published.urls(http)["google"]

    def count(cls: str) -> float:
        for line in http.get("/metrics").text.splitlines():
            if (
                line.startswith("firefeed_feed_fetches_total{")
                and f'project="{published.project}"' in line
                and 'export="google"' in line
                and f'status_class="{cls}"' in line
            ):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    etag = http.get(url).headers["etag"]
    http.get(url, headers={"If-None-Match": etag})
    http.get(url, headers={"If-None-Match": etag})
    assert count("2xx") == 1 and count("3xx") == 2
    http.get(url, headers={"Range": "bytes=999999999-"})
    assert count("4xx") == 1


def _slow_get(url: str) -> tuple[socket.socket, bytes]:
    """A GET whose client reads nothing yet, on a tiny receive buffer: the server is held mid-body."""
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    sock.sendall(f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
    return sock, sock.recv(1024)


def test_a_fetch_across_a_publish_gets_the_old_file_whole_and_the_next_one_the_new(
    env: Path, http: httpx.Client, api: str, tmp_path: Path
) -> None:
    p = Project(tmp_path, [{"name": "jsonl", "format": "jsonl", "path": "feed.jsonl"}], items=3000, width=2000)
    p.run()
    old = _file(env, p, "feed.jsonl")
    url = api + p.urls(http)["jsonl"]
    sock, first = _slow_get(url)
    try:
        p.write(2)
        p.run()
        new = _file(env, p, "feed.jsonl")
        assert new != old
        data = bytearray(first)
        sock.settimeout(30)
        while chunk := sock.recv(1 << 20):
            data += chunk
    finally:
        sock.close()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert f'etag: "{hashlib.sha256(old).hexdigest()}"'.encode() in head.lower()
    assert body == old
    r = http.get(url)
    assert r.content == new and r.headers["etag"] == f'"{hashlib.sha256(new).hexdigest()}"'
    # A client that leaves mid-body costs the server nothing but its own answer.
    for _ in range(3):
        gone, _head = _slow_get(url)
        gone.close()
    again = http.get(url)
    assert again.status_code == 200 and again.content == new


def test_a_feed_in_a_bucket_is_served_from_the_object_a_run_published(
    http: httpx.Client, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.integration.moto_s3 import bucket_objects, new_bucket

    bucket = new_bucket(s3_endpoint)
    monkeypatch.setenv("FIREFEED_STORAGE_URL", f"s3://{bucket}/ff")
    monkeypatch.setenv("FIREFEED_STORAGE_ENDPOINT_URL", s3_endpoint)
    reset_settings()
    try:
        p = Project(tmp_path, [GOOGLE])
        p.run()
        body = bucket_objects(s3_endpoint, bucket)[f"ff/exports/{p.company}/{p.project}/google.xml"]
        url = p.urls(http)["google"]
        r = http.get(url)
        assert r.status_code == 200 and r.content == body
        assert r.headers["etag"] == f'"{hashlib.sha256(body).hexdigest()}"'
        part = http.get(url, headers={"Range": "bytes=5-9"})
        assert part.status_code == 206 and part.content == body[5:10]
        assert http.get(url, headers={"If-None-Match": r.headers["etag"]}).status_code == 304
    finally:
        monkeypatch.delenv("FIREFEED_STORAGE_URL")
        monkeypatch.delenv("FIREFEED_STORAGE_ENDPOINT_URL")
        reset_settings()


class _Poller:
    """Fetches a feed URL every 20 ms on a thread, as a busy channel would: the API's index is then always
    checked less than a second ago, and a request that finds it behind must not wait for the next check."""

    def __init__(self, api: str, path: str) -> None:
        import threading

        self.api, self.path = api, path
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.api, timeout=30) as client:
            while not self.stop.is_set():
                client.head(self.path)
                self.stop.wait(0.02)

    def __enter__(self) -> _Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_an_id_made_by_another_process_answers_at_once_while_the_index_is_busy(
    env: Path, http: httpx.Client, api: str, published: Project
) -> None:
    from firefeed.db.engine import get_engine
    from firefeed.feeds.store import rotate

    body = _file(env, published, "google.xml")
    with _Poller(api, published.urls(http)["csv"]):
        for _ in range(20):
            # The test process is another process to the API: nothing tells the API's index of the new id.
            new = rotate(get_engine(), published.project, "google")
            r = http.get(f"/feeds/{new}/google.xml")
            assert r.status_code == 200 and r.content == body


def test_a_fetch_right_after_a_publish_gets_that_file_with_its_etag(
    env: Path, http: httpx.Client, api: str, tmp_path: Path
) -> None:
    p = Project(tmp_path, [{"name": "jsonl", "format": "jsonl", "path": "feed.jsonl"}], items=20)
    assert cli("apply", str(p.spec))[0] == 0
    url = p.urls(http)["jsonl"]
    with _Poller(api, url):
        assert http.get(url).status_code == 404  # known id, nothing published yet
        for version in range(1, 6):
            p.write(version)
            if version == 3:  # the same size as the file it replaces: only the index tells them apart
                (tmp_path / "main.csv").write_text((tmp_path / "main.csv").read_text().replace("v3", "w3"))
            p.run()
            new = _file(env, p, "feed.jsonl")
            r = http.get(url)
            assert r.status_code == 200 and r.content == new, version
            assert r.headers.get("etag") == f'"{hashlib.sha256(new).hexdigest()}"', version
