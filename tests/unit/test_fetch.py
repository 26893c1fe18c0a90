"""FETCH against a real HTTP server on 127.0.0.1 and real files: no internet needed."""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import socket
import struct
import threading
import time
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from firefeed.config import Settings
from firefeed.errors import FetchError, InvalidSourceRequestError, UnsafePathError, UnsafeURLError
from firefeed.pipeline.fetch import FetchResult, Validators, fetch_source
from firefeed.secrets.references import Resolver, SpecOrigin

CSV = b"id,title,price\n1,Shoe,10\n2,Boot,20\n"
SECRET = "s3cr3t-t0ken-value"
# A spec applied by the CLI on a server whose FIREFEED_SPEC_ENV_ALLOW lets specs read SHOES_TOKEN.
CLI_REFS = Resolver(company=None, origin=SpecOrigin.CLI, env_allow="SHOES_TOKEN")

Route = Callable[[BaseHTTPRequestHandler], None]


def make_settings(**overrides: Any) -> Settings:
    """Every FETCH setting given explicitly, so the environment cannot change a test."""
    values: dict[str, Any] = {
        "fetch_timeout_s": 2.0,
        "fetch_retries": 2,
        "fetch_backoff_s": 0.01,
        "fetch_max_bytes": 10 * 1024 * 1024,
        "fetch_allow_private": True,
        "fetch_allowed_hosts": "",
        "local_sources_root": None,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


class FeedServer:
    """A tiny HTTP server whose paths are set per test; it counts hits and keeps request headers."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: Counter[str] = Counter()
        self.headers: dict[str, list[dict[str, str]]] = {}
        self.release = threading.Event()  # lets hanging handlers go at teardown
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                server.hits[path] += 1
                server.headers.setdefault(path, []).append({k.lower(): v for k, v in self.headers.items()})
                route = server.routes.get(path)
                if route is None:
                    self.send_error(404)
                else:
                    route(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture()
def server() -> Iterator[FeedServer]:
    srv = FeedServer()
    try:
        yield srv
    finally:
        srv.close()


def body(data: bytes, status: int = 200, **headers: str) -> Route:
    def route(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            h.send_header(name.replace("_", "-"), value)
        h.end_headers()
        h.wfile.write(data)

    return route


def status(code: int, **headers: str) -> Route:
    return body(b"", code, **headers)


def sequence(*routes: Route) -> Route:
    """Answer with each route in turn, then keep answering with the last."""
    queue = list(routes)

    def route(h: BaseHTTPRequestHandler) -> None:
        (queue.pop(0) if len(queue) > 1 else queue[0])(h)

    return route


def reset(h: BaseHTTPRequestHandler) -> None:
    """Close the connection with a TCP RST before answering."""
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.connection.close()
    h.close_connection = True


def fetch(url: str, tmp_path: Path, **kwargs: Any) -> FetchResult:
    kwargs.setdefault("settings", make_settings())
    kwargs.setdefault("previous", None)
    kwargs.setdefault("headers", None)
    kwargs.setdefault("base_dir", tmp_path / "spec")
    return fetch_source(source="main", url=url, dest_dir=tmp_path / "dl", **kwargs)


def leftovers(tmp_path: Path) -> list[str]:
    folder = tmp_path / "dl"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part")) if folder.exists() else []


# ------------------------------------------------------------ downloads


def test_a_plain_feed_is_saved_with_its_validators(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/shoes.csv"] = body(
        CSV, ETag='"v1"', Last_Modified="Wed, 01 Jan 2025 00:00:00 GMT", Content_Type="text/csv"
    )
    result = fetch(server.url("/shoes.csv"), tmp_path)
    assert result.path is not None and result.path.read_bytes() == CSV
    assert result.path.parent == tmp_path / "dl" and result.path.name == "main.csv"
    assert result.bytes == len(CSV)
    assert not result.not_modified
    assert result.validators == Validators('"v1"', "Wed, 01 Jan 2025 00:00:00 GMT", hashlib.sha256(CSV).hexdigest())
    assert result.content_type == "text/csv"
    assert result.final_url == server.url("/shoes.csv")
    assert leftovers(tmp_path) == []


def test_a_gzip_feed_is_decompressed(server: FeedServer, tmp_path: Path) -> None:
    packed = gzip.compress(CSV)
    server.routes["/shoes.csv.gz"] = body(packed)
    result = fetch(server.url("/shoes.csv.gz"), tmp_path)
    assert result.path is not None and result.path.read_bytes() == CSV
    assert result.path.name == "main.csv"
    assert result.bytes == len(packed)
    assert result.validators.sha256 == hashlib.sha256(packed).hexdigest()  # of the bytes received
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["main.csv"]


def test_a_zip_feed_yields_its_single_member(server: FeedServer, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("export/products.tsv", CSV)
    server.routes["/download"] = body(buf.getvalue())
    result = fetch(server.url("/download"), tmp_path)
    assert result.path is not None and result.path.read_bytes() == CSV
    assert result.path.name == "main.tsv"


def test_compression_none_keeps_the_bytes_as_they_are(server: FeedServer, tmp_path: Path) -> None:
    packed = gzip.compress(CSV)
    server.routes["/f.gz"] = body(packed)
    result = fetch(server.url("/f.gz"), tmp_path, compression="none")
    assert result.path is not None and result.path.read_bytes() == packed


def test_an_unknown_compression_is_refused(server: FeedServer, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="compression must be one of"):
        fetch(server.url("/f"), tmp_path, compression="bz2")


def test_a_matching_etag_gives_not_modified(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = status(304, ETag='"v1"')
    previous = Validators(etag='"v1"', sha256="abc")
    result = fetch(server.url("/f.csv"), tmp_path, previous=previous)
    assert result.not_modified and result.path is None
    assert result.validators == Validators(etag='"v1"', sha256="abc")
    assert server.headers["/f.csv"][0]["if-none-match"] == '"v1"'
    assert "if-modified-since" not in server.headers["/f.csv"][0]


def test_an_unchanged_last_modified_gives_not_modified(server: FeedServer, tmp_path: Path) -> None:
    stamp = "Wed, 01 Jan 2025 00:00:00 GMT"
    server.routes["/f.csv"] = status(304)
    result = fetch(server.url("/f.csv"), tmp_path, previous=Validators(last_modified=stamp, sha256="abc"))
    assert result.not_modified and result.path is None
    assert result.validators.last_modified == stamp and result.validators.sha256 == "abc"
    assert server.headers["/f.csv"][0]["if-modified-since"] == stamp


def test_a_304_to_a_plain_get_is_an_error(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = status(304)
    with pytest.raises(FetchError, match="304"):
        fetch(server.url("/f.csv"), tmp_path)


def test_the_same_content_again_gives_not_modified(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = body(CSV)
    first = fetch(server.url("/f.csv"), tmp_path)
    assert first.path is not None
    first.path.unlink()
    second = fetch(server.url("/f.csv"), tmp_path, previous=first.validators)
    assert second.not_modified and second.path is None
    assert second.validators.sha256 == first.validators.sha256
    assert list((tmp_path / "dl").iterdir()) == []


def test_changed_content_is_not_not_modified(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = body(CSV + b"3,Sock,1\n")
    result = fetch(server.url("/f.csv"), tmp_path, previous=Validators(sha256=hashlib.sha256(CSV).hexdigest()))
    assert not result.not_modified and result.path is not None


# ------------------------------------------------------------ retries


def test_a_503_twice_then_200_is_retried(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = sequence(status(503), status(503), body(CSV))
    result = fetch(server.url("/f.csv"), tmp_path)
    assert result.path is not None and result.path.read_bytes() == CSV
    assert server.hits["/f.csv"] == 3


def test_a_429_is_retried(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = sequence(status(429, Retry_After="0"), body(CSV))
    assert fetch(server.url("/f.csv"), tmp_path).path is not None
    assert server.hits["/f.csv"] == 2


def test_a_lasting_5xx_gives_up_after_the_retries(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = status(500)
    with pytest.raises(FetchError, match=r"HTTP 500 from http://127\.0\.0\.1:\d+/f\.csv \(gave up after 3 tries\)"):
        fetch(server.url("/f.csv"), tmp_path)
    assert server.hits["/f.csv"] == 3


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410])
def test_a_4xx_is_not_retried(server: FeedServer, tmp_path: Path, code: int) -> None:
    server.routes["/f.csv"] = status(code)
    with pytest.raises(FetchError, match=rf"HTTP {code} from http://127\.0\.0\.1:\d+/f\.csv") as err:
        fetch(server.url("/f.csv"), tmp_path)
    assert err.value.source == "main"
    assert server.hits["/f.csv"] == 1


def test_a_connection_reset_is_retried(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = sequence(reset, body(CSV))
    assert fetch(server.url("/f.csv"), tmp_path).path is not None
    assert server.hits["/f.csv"] == 2


def test_lasting_connection_resets_give_a_fetch_error(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = reset
    with pytest.raises(FetchError, match="gave up after 3 tries"):
        fetch(server.url("/f.csv"), tmp_path)
    assert server.hits["/f.csv"] == 3


def test_a_refused_connection_gives_a_fetch_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(FetchError, match="could not fetch"):
        fetch(f"http://127.0.0.1:{port}/f.csv", tmp_path, settings=make_settings(fetch_retries=1))


def test_a_server_that_hangs_times_out(server: FeedServer, tmp_path: Path) -> None:
    def hang(h: BaseHTTPRequestHandler) -> None:
        server.release.wait(10)

    server.routes["/f.csv"] = hang
    started = time.monotonic()
    with pytest.raises(FetchError, match="timed out"):
        fetch(
            server.url("/f.csv"),
            tmp_path,
            settings=make_settings(fetch_timeout_s=0.2, fetch_retries=1),
        )
    assert time.monotonic() - started < 2
    assert server.hits["/f.csv"] == 2
    assert leftovers(tmp_path) == []


def test_a_body_that_stalls_midway_times_out(server: FeedServer, tmp_path: Path) -> None:
    def stall(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.write(b"x" * 10)
        h.wfile.flush()
        server.release.wait(10)

    server.routes["/f.csv"] = stall
    with pytest.raises(FetchError, match="timed out reading"):
        fetch(
            server.url("/f.csv"),
            tmp_path,
            settings=make_settings(fetch_timeout_s=0.2, fetch_retries=0),
        )
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------ size caps


def test_an_endless_body_stops_at_the_size_cap(server: FeedServer, tmp_path: Path) -> None:
    cap = 16 * 1024 * 1024
    sent = [0]
    done = threading.Event()

    def endless(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.end_headers()  # no Content-Length: HTTP/1.0 body until close
        chunk = b"x" * 65536
        try:
            while sent[0] < 20 * cap:  # a safety stop if the client never hangs up
                h.wfile.write(chunk)
                sent[0] += len(chunk)
        except OSError:
            pass
        finally:
            done.set()

    server.routes["/f.csv"] = endless
    with pytest.raises(FetchError, match=f"larger than the size cap of {cap} bytes"):
        fetch(server.url("/f.csv"), tmp_path, settings=make_settings(fetch_max_bytes=cap))
    assert done.wait(5)
    assert sent[0] < 2 * cap
    assert server.hits["/f.csv"] == 1  # not retried
    assert leftovers(tmp_path) == []


def test_a_content_length_over_the_cap_is_refused_up_front(server: FeedServer, tmp_path: Path) -> None:
    def huge(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(10**12))
        h.end_headers()
        h.wfile.write(b"x" * 100)

    server.routes["/f.csv"] = huge
    with pytest.raises(FetchError, match="larger than the size cap of 1000 bytes"):
        fetch(server.url("/f.csv"), tmp_path, settings=make_settings(fetch_max_bytes=1000))
    assert leftovers(tmp_path) == []


def test_a_content_encoded_body_is_capped_after_decoding(server: FeedServer, tmp_path: Path) -> None:
    packed = gzip.compress(b"a" * 100_000)
    server.routes["/f.csv"] = body(packed, Content_Encoding="gzip")
    with pytest.raises(FetchError, match="larger than the size cap of 50000 bytes"):
        fetch(server.url("/f.csv"), tmp_path, settings=make_settings(fetch_max_bytes=50_000))


def test_a_content_encoded_bomb_is_held_to_the_expansion_ratio(server: FeedServer, tmp_path: Path) -> None:
    packed = gzip.compress(b"\0" * (8 * 1024 * 1024))  # 8 MiB in about 8 KB, within the download cap
    server.routes["/f.csv"] = body(packed, Content_Encoding="gzip")
    settings = make_settings(fetch_max_expansion_ratio=50, fetch_expansion_floor_bytes=1024 * 1024)
    with pytest.raises(FetchError, match=r"decompressed more than 50x its compressed size of \d+ bytes"):
        fetch(server.url("/f.csv"), tmp_path, settings=settings)
    assert leftovers(tmp_path) == []
    # Below the floor the ratio does not apply: the same server answer of a small feed passes.
    server.routes["/small.csv"] = body(gzip.compress(CSV * 1000), Content_Encoding="gzip")
    result = fetch(server.url("/small.csv"), tmp_path, settings=settings)
    assert result.path is not None and result.path.read_bytes() == CSV * 1000


def test_a_gzip_bomb_is_stopped_at_the_cap(server: FeedServer, tmp_path: Path) -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip container
    zeros = b"\0" * (1024 * 1024)
    bomb = b"".join(packer.compress(zeros) for _ in range(200)) + packer.flush()  # 200 MB inside
    assert len(bomb) < 1024 * 1024
    server.routes["/bomb.csv.gz"] = body(bomb)
    with pytest.raises(FetchError, match="decompressed size exceeds the size cap of 4194304 bytes"):
        fetch(
            server.url("/bomb.csv.gz"),
            tmp_path,
            settings=make_settings(fetch_max_decompressed_bytes=4 * 1024 * 1024),
        )
    assert list((tmp_path / "dl").iterdir()) == []
    # The default limits: the ratio (100x past a 64 MiB floor) stops it, not the 10 GiB cap.
    with pytest.raises(FetchError, match=r"source 'main': decompressed more than 100x .*EXPANSION_RATIO"):
        fetch(server.url("/bomb.csv.gz"), tmp_path)
    assert list((tmp_path / "dl").iterdir()) == []


# ------------------------------------------------------------ redirects and the SSRF guard


def test_a_redirect_is_followed(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/old"] = status(301, Location="/new.csv")
    server.routes["/new.csv"] = body(CSV)
    result = fetch(server.url("/old"), tmp_path, headers={"X-Api-Key": "k"})
    assert result.path is not None and result.path.read_bytes() == CSV
    assert result.final_url == server.url("/new.csv")
    assert server.headers["/new.csv"][0]["x-api-key"] == "k"  # same origin keeps the headers


def test_a_cross_origin_redirect_drops_the_source_headers(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/old"] = status(302, Location=server.url("/new.csv", host="localhost"))
    server.routes["/new.csv"] = body(CSV)
    fetch(
        server.url("/old"),
        tmp_path,
        headers={"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET},
    )
    seen = server.headers["/new.csv"][0]
    assert "authorization" not in seen and "x-api-key" not in seen


def test_a_redirect_loop_is_bounded(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/a"] = status(302, Location="/b")
    server.routes["/b"] = status(302, Location="/a")
    with pytest.raises(FetchError, match="more than 10 redirects"):
        fetch(server.url("/a"), tmp_path)
    assert server.hits["/a"] + server.hits["/b"] == 11


@pytest.mark.parametrize(
    "target",
    [
        "http://localhost:{port}/f.csv",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/x",
    ],
)
def test_a_redirect_to_a_private_address_is_refused(server: FeedServer, tmp_path: Path, target: str) -> None:
    server.routes["/go"] = status(302, Location=target.format(port=server.port))
    server.routes["/f.csv"] = body(CSV)
    settings = make_settings(fetch_allow_private=False, fetch_allowed_hosts="127.0.0.1")
    with pytest.raises(UnsafeURLError, match="non-public address"):
        fetch(server.url("/go"), tmp_path, settings=settings)
    assert server.hits["/f.csv"] == 0
    assert server.hits["/go"] == 1  # a refusal is not retried


def test_a_redirect_to_a_file_url_is_refused_as_unsafe(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/go"] = status(302, Location="file:///etc/passwd")
    with pytest.raises(UnsafeURLError, match="redirects to a non-http URL"):
        fetch(server.url("/go"), tmp_path)


@pytest.mark.parametrize("target", ["http://0177.0.0.1:{port}/f.csv", "http://\uff11\uff12\uff17.0.0.1:{port}/f.csv"])
def test_a_redirect_to_an_address_in_another_notation_is_unsafe(
    server: FeedServer, tmp_path: Path, target: str
) -> None:
    # Even with the guard lifted: httpx would call these invalid URLs, a browser (or libc) reads 127.0.0.1.
    location = target.format(port=server.port).encode()  # raw UTF-8: http.server would send latin-1 only

    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n")
        h.close_connection = True

    server.routes["/go"] = redirect
    server.routes["/f.csv"] = body(CSV)
    with pytest.raises(UnsafeURLError, match="non-standard notation"):
        fetch(server.url("/go"), tmp_path)
    assert server.hits["/f.csv"] == 0


def test_a_redirect_to_an_unreadable_url_stays_the_servers_failure(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/go"] = status(302, Location="http://999.0.0.1/f.csv")
    with pytest.raises(FetchError, match="redirects to an invalid URL") as err:
        fetch(server.url("/go"), tmp_path)
    assert type(err.value) is FetchError


@pytest.mark.parametrize(
    "url",
    ["http://0177.0.0.1/f.csv", "http://\uff11\uff12\uff17.0.0.1/f.csv", "http://0x7f.1/f.csv", "http://127.1/f"],
)
def test_a_source_url_with_an_address_in_another_notation_is_refused_before_connecting(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_connection(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("connected to a host the guard must refuse first")

    monkeypatch.setattr(socket, "getaddrinfo", no_connection)
    monkeypatch.setattr(socket, "create_connection", no_connection)
    with pytest.raises(UnsafeURLError, match=r"write the address as 127\.0\.0\.1") as err:
        fetch(url, tmp_path, settings=make_settings(fetch_allow_private=False))
    assert err.value.source == "main"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "the URL is empty"),
        ("   ", "the URL is empty"),
        ("http://999.0.0.1/f.csv", "invalid URL"),
        ("http://exa mple.com:notaport/f.csv", "invalid URL"),
        ("http:///f.csv", "the URL has no host"),
    ],
)
def test_a_url_that_cannot_be_requested_is_an_invalid_source_request(tmp_path: Path, url: str, message: str) -> None:
    with pytest.raises(InvalidSourceRequestError, match=message) as err:
        fetch(url, tmp_path)
    assert (err.value.code, err.value.source) == ("invalid_source_request", "main")


def test_loopback_is_refused_by_default(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = body(CSV)
    with pytest.raises(UnsafeURLError, match="non-public address") as err:
        fetch(server.url("/f.csv"), tmp_path, settings=make_settings(fetch_allow_private=False))
    assert err.value.source == "main"
    assert server.hits["/f.csv"] == 0


def test_an_allowed_host_may_be_private(server: FeedServer, tmp_path: Path) -> None:
    server.routes["/f.csv"] = body(CSV)
    settings = make_settings(fetch_allow_private=False, fetch_allowed_hosts="example.org, 127.0.0.1")
    assert fetch(server.url("/f.csv"), tmp_path, settings=settings).path is not None


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/f",
        "http://0.0.0.0/f",
        "http://[::ffff:127.0.0.1]/f",
        "http://[::ffff:a9fe:a9fe]/f",
        "http://localhost/f",
        "http://10.1.2.3/f",
        "http://172.16.0.1/f",
        "http://192.168.1.1/f",
        "http://[fd00::1]/f",
        "http://[fe80::1]/f",
        "http://224.0.0.1/f",
        "http://2130706433/f",
        "https://127.0.0.1:8443/f",
    ],
)
def test_non_public_destinations_are_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(UnsafeURLError):
        fetch(url, tmp_path, settings=make_settings(fetch_allow_private=False))


@pytest.mark.parametrize(
    "url", ["ssh://example.com/f.csv", "gopher://example.com/", "data:text/csv,a,b", "javascript:x"]
)
def test_other_schemes_are_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(UnsafeURLError, match="scheme"):
        fetch(url, tmp_path)


# ------------------------------------------------------------ headers and secrets


def test_header_variables_are_read_from_the_environment(
    server: FeedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOES_TOKEN", SECRET)
    server.routes["/f.csv"] = body(CSV)
    fetch(server.url("/f.csv"), tmp_path, headers={"Authorization": "Bearer ${SHOES_TOKEN}"}, references=CLI_REFS)
    assert server.headers["/f.csv"][0]["authorization"] == f"Bearer {SECRET}"


def test_an_unset_header_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIREFEED_TEST_NO_SUCH_VAR", raising=False)
    with pytest.raises(FetchError, match=r"header 'Authorization' uses \$\{FIREFEED_TEST_NO_SUCH_VAR\}"):
        fetch(
            "http://127.0.0.1:9/f",
            tmp_path,
            headers={"Authorization": "Bearer ${FIREFEED_TEST_NO_SUCH_VAR}"},
        )


@pytest.mark.parametrize("route", [status(404), status(503), reset])
def test_a_header_value_never_appears_in_errors_or_logs(
    server: FeedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    route: Route,
) -> None:
    monkeypatch.setenv("SHOES_TOKEN", SECRET)
    server.routes["/f.csv"] = route
    caplog.set_level(logging.DEBUG)
    with pytest.raises(FetchError) as err:
        fetch(
            server.url("/f.csv"),
            tmp_path,
            headers={"Authorization": "Bearer ${SHOES_TOKEN}", "X-Key": SECRET},
            references=CLI_REFS,
        )
    chain: list[BaseException] = []
    exc: BaseException | None = err.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert all(SECRET not in repr(e) and SECRET not in str(e) for e in chain)
    assert SECRET not in caplog.text


def test_a_header_value_with_a_line_break_is_refused_without_showing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOES_TOKEN", f"{SECRET}\r\nX-Evil: 1")
    with pytest.raises(InvalidSourceRequestError, match="not allowed in a header") as err:
        fetch("http://127.0.0.1:9/f", tmp_path, headers={"Authorization": "${SHOES_TOKEN}"}, references=CLI_REFS)
    assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"X-Key": "caf\u00e9"}, "not allowed in a header"),
        ({"X-Key": "a\r\nX-Evil: 1"}, "not allowed in a header"),
        ({"X Key": "a"}, "not a valid header name"),
        ({"X-Key:": "a"}, "not a valid header name"),
    ],
)
def test_a_bad_header_is_an_invalid_source_request_sent_nowhere(
    server: FeedServer, tmp_path: Path, headers: dict[str, str], message: str
) -> None:
    server.routes["/f.csv"] = body(CSV)
    with pytest.raises(InvalidSourceRequestError, match=message):
        fetch(server.url("/f.csv"), tmp_path, headers=headers)
    assert server.hits["/f.csv"] == 0


def test_a_reference_the_spec_may_not_use_is_an_invalid_source_request(tmp_path: Path) -> None:
    with pytest.raises(InvalidSourceRequestError, match=r"uses \$\{secret:TOKEN\}"):
        fetch("http://127.0.0.1:9/f", tmp_path, headers={"X-Key": "${secret:TOKEN}"})


# ------------------------------------------------------------ local files


@pytest.fixture()
def spec_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "spec"
    folder.mkdir()
    (folder / "stock.csv").write_bytes(CSV)
    return folder


def test_a_relative_path_is_read_in_place(tmp_path: Path, spec_dir: Path) -> None:
    result = fetch("stock.csv", tmp_path)
    assert result.path == spec_dir / "stock.csv"  # not copied
    assert result.bytes == len(CSV) and not result.not_modified
    # nothing to compare with: not read, its digest is taken while it is parsed (`file_digest`)
    assert result.validators == Validators()
    assert result.final_url == (spec_dir / "stock.csv").as_uri()


def test_a_local_file_with_a_previous_digest_is_hashed_to_compare(tmp_path: Path, spec_dir: Path) -> None:
    result = fetch("stock.csv", tmp_path, previous=Validators(sha256="0" * 64))
    assert not result.not_modified and result.path == spec_dir / "stock.csv"
    assert result.validators.sha256 == hashlib.sha256(CSV).hexdigest()
    assert result.validators.identity is not None  # its stat at the read, for the next run to keep


def test_a_files_digest_is_taken_beside_the_block_and_only_inside_it(tmp_path: Path) -> None:
    from firefeed.pipeline.fetch import file_digest

    path = tmp_path / "big.bin"
    data = bytes(range(256)) * 40_000  # several read chunks
    path.write_bytes(data)
    with file_digest(path) as digest:
        assert digest().sha256 == hashlib.sha256(data).hexdigest()
    with file_digest(path) as late:
        pass
    with pytest.raises(RuntimeError, match="after its block"):
        late()


def test_a_file_url_inside_the_spec_folder_is_read(tmp_path: Path, spec_dir: Path) -> None:
    result = fetch((spec_dir / "stock.csv").as_uri(), tmp_path)
    assert result.path == spec_dir / "stock.csv"


def test_an_unchanged_local_file_is_not_modified(tmp_path: Path, spec_dir: Path) -> None:
    again = fetch("stock.csv", tmp_path, previous=Validators(sha256=hashlib.sha256(CSV).hexdigest()))
    assert again.not_modified and again.path is None


def test_a_compressed_local_file_is_decompressed_into_dest_dir(tmp_path: Path, spec_dir: Path) -> None:
    (spec_dir / "stock.csv.gz").write_bytes(gzip.compress(CSV))
    result = fetch("stock.csv.gz", tmp_path)
    assert result.path == tmp_path / "dl" / "main.csv" and result.path.read_bytes() == CSV
    assert (spec_dir / "stock.csv.gz").exists()


def test_a_missing_local_file_is_named_as_written(tmp_path: Path, spec_dir: Path) -> None:
    with pytest.raises(FetchError, match=r"no such file: data/nope\.csv"):
        fetch("data/nope.csv", tmp_path)


@pytest.mark.parametrize("url", ["../secret.csv", "sub/../../secret.csv", "file:../secret.csv"])
def test_a_path_climbing_out_of_the_spec_folder_is_refused(tmp_path: Path, spec_dir: Path, url: str) -> None:
    (tmp_path / "secret.csv").write_bytes(CSV)
    with pytest.raises(UnsafePathError, match="outside the allowed folders"):
        fetch(url, tmp_path)


@pytest.mark.parametrize("form", ["path", "uri"])
def test_an_absolute_path_elsewhere_is_refused(tmp_path: Path, spec_dir: Path, form: str) -> None:
    outside = tmp_path / "elsewhere.csv"
    outside.write_bytes(CSV)
    with pytest.raises(UnsafePathError):
        fetch(str(outside) if form == "path" else outside.as_uri(), tmp_path)


def test_a_symlink_out_of_the_spec_folder_is_refused(tmp_path: Path, spec_dir: Path) -> None:
    (tmp_path / "secret.csv").write_bytes(CSV)
    (spec_dir / "link.csv").symlink_to(tmp_path / "secret.csv")
    (spec_dir / "linkdir").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        fetch("link.csv", tmp_path)
    with pytest.raises(UnsafePathError):
        fetch("linkdir/secret.csv", tmp_path)


def test_a_file_url_with_a_host_is_refused(tmp_path: Path, spec_dir: Path) -> None:
    with pytest.raises(UnsafePathError, match="remote host"):
        fetch("file://fileserver/share/stock.csv", tmp_path)


def test_an_api_spec_may_not_read_local_files_without_a_root(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="FIREFEED_LOCAL_SOURCES_ROOT"):
        fetch("/etc/hostname", tmp_path, base_dir=None)


def test_an_api_spec_reads_inside_the_local_sources_root(tmp_path: Path) -> None:
    root = tmp_path / "feeds"
    root.mkdir()
    (root / "stock.csv").write_bytes(CSV)
    settings = make_settings(local_sources_root=root)
    assert fetch("stock.csv", tmp_path, base_dir=None, settings=settings).path == root / "stock.csv"
    assert fetch(str(root / "stock.csv"), tmp_path, base_dir=None, settings=settings).path == root / "stock.csv"
    with pytest.raises(UnsafePathError):
        fetch("../x.csv", tmp_path, base_dir=None, settings=settings)


def test_a_local_file_over_the_cap_is_refused(tmp_path: Path, spec_dir: Path) -> None:
    with pytest.raises(FetchError, match="larger than the size cap of 10 bytes"):
        fetch("stock.csv", tmp_path, settings=make_settings(fetch_max_bytes=10))


def test_a_folder_is_not_a_source_file(tmp_path: Path, spec_dir: Path) -> None:
    (spec_dir / "sub").mkdir()
    with pytest.raises(FetchError, match="not a file: sub"):
        fetch("sub", tmp_path)
