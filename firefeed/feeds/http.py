"""`GET`/`HEAD /feeds/{feed_id}/{file name}` as a plain ASGI middleware, ahead of FastAPI's machinery.

A feed URL needs no API token, no JSON and no dependency injection; what it needs is speed (a 304 from
memory, 2,000 a second on two cores) and streaming (a 1.3 GB file in 1 MiB chunks). So it is answered
here, before the FastAPI router, from the process's `FeedIndex`; every other path goes on to the app.

Order of checks: the id and the file name (404), basic auth (401), a published file (404), then the
validators (304), a Range (206/416) and the body (200, gzip-encoded on the fly when the client accepts
gzip and the file is not gzip already). The three 404s share one body, so a client learns nothing
about which part was wrong.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import fcntl
import hmac
import ipaddress
import logging
import os
import re
import socket
import struct
import time
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings, get_settings
from firefeed.feeds.fetches import FetchRecorder
from firefeed.feeds.files import OpenFile, open_published
from firefeed.feeds.index import MAX_AHEAD_S, Feed, FeedIndex
from firefeed.storage import export_storage

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PREFIX = "/feeds/"
CONTENT_TYPES = {
    "google-xml": b"application/xml",
    "csv": b"text/csv; charset=utf-8",
    "tsv": b"text/tab-separated-values; charset=utf-8",
    "json": b"application/json",
    "jsonl": b"application/x-ndjson",
}
NOT_FOUND = b'{"error":"not_found","message":"no such feed"}'
UNAUTHORIZED = b'{"error":"unauthorized","message":"this feed needs its username and password (HTTP basic auth)"}'
#: Fast, not small: a 1.3 GB feed compressed at level 6 would take a core for most of a minute per fetch.
GZIP_LEVEL = 1
#: Streams sent on threads at once (more go on the event loop); a slow client holds one for its download.
SENDFILE_THREADS = 32
#: A client that takes nothing for this long is left (seconds).
SEND_IDLE_S = 120
#: Most bytes one sendfile call may send (it sends what the socket buffer takes anyway).
SENDFILE_MAX = 8 << 20
#: The send buffer of a stream to a loopback peer (a proxy on the same host, a local fetcher). The kernel's
#: autotuned buffer grows to megabytes, which on loopback costs throughput: the bytes in flight no longer
#: stay in the CPU's cache between the sender's and the reader's copy (measured on the 1.3 GB feed: 4
#: fetches 0.51-0.55x of `cat` with the kernel's buffer, 0.70-0.78x with 256 KiB-1 MiB). A remote peer keeps
#: the autotuning: a fixed buffer would cap a long round trip's throughput (buffer / RTT).
LOOPBACK_SNDBUF = 512 << 10
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class FeedsMiddleware:
    """Answers `/feeds/...` itself; hands every other request to the app it wraps."""

    def __init__(self, app: ASGIApp, service: FeedService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            await self.service.handle(scope, send)
        else:
            await self.app(scope, receive, send)


class FeedService:
    """One per API process: the index, the fetch record, and the storage the files are read from."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.index = FeedIndex(engine, settings)
        self.fetches = FetchRecorder(engine)
        self.settings = settings

    async def handle(self, scope: Scope, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        feed: Feed | None = None
        status = 404
        try:
            status, feed = await self._answer(scope, headers, send)
        finally:
            self.fetches.record(feed, status, headers.get("user-agent"))

    async def _answer(self, scope: Scope, headers: dict[str, str], send: Send) -> tuple[int, Feed | None]:
        method = scope["method"]
        if method not in ("GET", "HEAD"):
            await _send(send, 405, [(b"allow", b"GET, HEAD")], b"", head=False)
            return 405, None
        head = method == "HEAD"
        arrived = time.time()
        feed_id, _, name = scope["path"][len(PREFIX) :].partition("/")
        feed = await self.index.get(feed_id) if feed_id and name and "/" not in name else None
        if feed is None:
            await _send(send, 404, [(b"content-type", b"application/json")], NOT_FOUND, head=head)
            return 404, None
        if name not in feed.names:
            await _send(send, 404, [(b"content-type", b"application/json")], NOT_FOUND, head=head)
            return 404, feed
        if feed.auth is not None and not await self._authorized(feed, headers.get("authorization", "")):
            challenge = [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Basic realm="FireFeed feed", charset="UTF-8"'),
            ]
            await _send(send, 401, challenge, UNAUTHORIZED, head=head)
            return 401, feed
        opened, feed = await self._open(feed, arrived)
        if opened is None:
            await _send(send, 404, [(b"content-type", b"application/json")], NOT_FOUND, head=head)
            return 404, feed
        try:
            return await self._file(feed, opened, headers, send, head=head), feed
        finally:
            opened.close()

    async def _open(self, feed: Feed, arrived: float) -> tuple[OpenFile | None, Feed]:
        """The export's published file, opened and told which publish it is, by an index that is not behind it.

        No file known, or none at the known key: a publish may have just happened, so the index checks
        once more and the file is opened again. A file changed after the index's last check started: a
        publish switched it in, so the index checks again and tells which publish the open file is (the
        file stays the one opened: a second open could find yet another publish, or none).
        """
        # Read per request: cached by the settings module, and tests point it at their own folders.
        storage = export_storage(get_settings())
        opened = open_published(storage, feed)
        if opened is None:
            await self.index.fresh(arrived)
            feed = await self.index.known(feed.feed_id) or feed
            return open_published(storage, feed), feed
        # A change stamped further ahead than MAX_AHEAD_S is a clock off (a bucket's server): waiting for a
        # check after it would hold every request for that file, so such a file waits for the next refresh.
        if opened.changed_by is not None and self.index.checked_at < opened.changed_by <= time.time() + MAX_AHEAD_S:
            await self.index.fresh(opened.changed_by)
            feed = await self.index.known(feed.feed_id) or feed
            opened.identify(feed)
        return opened, feed

    async def _authorized(self, feed: Feed, header: str) -> bool:
        assert feed.auth is not None
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        expected = await self.index.password(feed)
        if not sep or expected is None:
            return False
        # Both compared in constant time, and both always: the answer's timing tells nothing.
        ok_user = hmac.compare_digest(user.encode(), feed.auth.username.encode())
        ok_password = hmac.compare_digest(password.encode(), expected.encode())
        return ok_user and ok_password

    async def _file(self, feed: Feed, opened: OpenFile, headers: dict[str, str], send: Send, *, head: bool) -> int:
        key = feed.published[0].key
        gzipped = key.endswith(".gz")
        out: list[tuple[bytes, bytes]] = [
            (
                b"content-type",
                b"application/gzip" if gzipped else CONTENT_TYPES.get(feed.format, b"application/octet-stream"),
            ),
            (b"accept-ranges", b"bytes"),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
        ]
        pub = opened.published
        etag = f'"{pub.sha256}"' if pub is not None else None
        if pub is not None:
            out.append((b"etag", etag.encode()))  # type: ignore[union-attr]
            out.append((b"last-modified", format_datetime(pub.published_at.astimezone(UTC), usegmt=True).encode()))
            if _not_modified(headers, etag, pub.published_at):  # type: ignore[arg-type]
                await _send(send, 304, out, b"", head=True)
                return 304
        size = opened.size
        wanted = _range(headers, size, etag)
        if wanted == "unsatisfiable":
            out.append((b"content-range", f"bytes */{size}".encode()))
            await _send(send, 416, out, b"", head=True)
            return 416
        if isinstance(wanted, tuple):
            start, length = wanted
            out.append((b"content-range", f"bytes {start}-{start + length - 1}/{size}".encode()))
            out.append((b"content-length", str(length).encode()))
            await send({"type": "http.response.start", "status": 206, "headers": out})
            await _stream(send, opened, start, length, head=head)
            return 206
        if not gzipped:
            out.append((b"vary", b"Accept-Encoding"))
        if not gzipped and _accepts_gzip(headers.get("accept-encoding", "")):
            out.append((b"content-encoding", b"gzip"))
            await send({"type": "http.response.start", "status": 200, "headers": out})
            if not head:
                compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
                async for chunk in opened.chunks(0, size):
                    packed = await asyncio.to_thread(compressor.compress, chunk)  # zlib lets go of the GIL
                    if packed:
                        await send({"type": "http.response.body", "body": packed, "more_body": True})
                await send({"type": "http.response.body", "body": compressor.flush(), "more_body": False})
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return 200
        out.append((b"content-length", str(size).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": out})
        await _stream(send, opened, 0, size, head=head)
        return 200


async def _stream(send: Send, opened: OpenFile, start: int, length: int, *, head: bool) -> None:
    if not head and length > 0:
        sent = await _sendfile(send, opened, start, length)
        if sent < length:
            async for chunk in opened.chunks(start + sent, length - sent):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _sendfile(send: Send, opened: OpenFile, start: int, length: int) -> int:
    """Bytes sent from the open file straight to the client's socket by the kernel (sendfile); 0 when not possible.

    Copying 1.3 GB through Python costs a core for seconds per fetch; the kernel sends from the page cache
    without a copy. That needs the connection's socket, which uvicorn's own `send` carries (this handler
    runs outermost, so it gets that `send`); under another server, TLS, or a bucket, the chunks go through
    ASGI as usual. The socket is non-blocking: a full socket buffer waits for writability on the loop (on a
    duplicate descriptor: the transport owns the original). uvicorn counts the body against
    Content-Length, so it is told what was sent.
    """
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if (
        opened.fd is None
        or sock is None
        or not hasattr(cycle, "expected_content_length")
        or transport.get_extra_info("sslcontext") is not None  # type: ignore[union-attr]
    ):
        return 0
    while transport.get_write_buffer_size():  # type: ignore[union-attr]  # the head goes first
        if transport.is_closing():  # type: ignore[union-attr]
            return 0
        await asyncio.sleep(0.001)
    if _is_loopback(transport.get_extra_info("peername")):  # type: ignore[union-attr]
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, LOOPBACK_SNDBUF)
    # The server sets TCP_NODELAY for its small answers; a bulk send with it pushes every write out as its own
    # segments (on loopback 4 fetches went from 0.71-0.79x of `cat` to 0.47-0.53x with it). It is off for the
    # file, as nginx's tcp_nopush does, and back on after, which also sends the last partial segment at once.
    nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    if nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    out = os.dup(sock.fileno())
    try:
        if _SENDERS.busy < SENDFILE_THREADS:
            # Each stream on a thread of its own: both cores send, and the loop stays free for 304s.
            _SENDERS.busy += 1
            try:
                sent = await asyncio.get_running_loop().run_in_executor(
                    _SENDERS.pool, _send_blocking, out, opened.fd, start, length
                )
            finally:
                _SENDERS.busy -= 1
        else:
            sent = await _send_on_loop(out, opened.fd, start, length)
    finally:
        os.close(out)
        if nodelay and not transport.is_closing():  # type: ignore[union-attr]
            with contextlib.suppress(OSError):  # the client left meanwhile
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, nodelay)
    if sent < length:  # nothing more can reach this client: end the connection short of Content-Length
        transport.close()  # type: ignore[union-attr]
        cycle.expected_content_length = 0  # type: ignore[union-attr]
        return length
    cycle.expected_content_length -= sent  # type: ignore[union-attr]
    return sent


class _Senders:
    """The threads that send files (created on first use, kept for the process)."""

    def __init__(self) -> None:
        self.busy = 0
        self._pool: ThreadPoolExecutor | None = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(SENDFILE_THREADS, thread_name_prefix="feed-sendfile")
        return self._pool


_SENDERS = _Senders()


def _send_blocking(out: int, fd: int, start: int, length: int) -> int:
    """sendfile until done on a socket made blocking for the while; stops when the client leaves or reads
    nothing for SEND_IDLE_S (the socket's send timeout).

    Blocking, each call sends its whole slice in the kernel: the non-blocking loop woke for every few
    hundred KiB the client read, and those wake-ups cost about a fifth of the loopback throughput. The
    flag belongs to the socket (the transport's descriptor and this duplicate share it), so it is put back
    before the event loop writes again: the loop writes nothing on this connection until this returns.
    """
    flags = fcntl.fcntl(out, fcntl.F_GETFL)
    idle = struct.pack("ll", SEND_IDLE_S, 0)
    before = _sndtimeo(out, idle)
    fcntl.fcntl(out, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    sent = 0
    try:
        while sent < length:
            try:
                n = os.sendfile(out, fd, start + sent, min(length - sent, SENDFILE_MAX))
            except OSError:  # the send timed out (EAGAIN) or the client left (EPIPE, ECONNRESET)
                break
            if n == 0:
                break
            sent += n
    finally:
        fcntl.fcntl(out, fcntl.F_SETFL, flags)
        _sndtimeo(out, before)
    return sent


def _sndtimeo(fd: int, value: bytes) -> bytes:
    """Sets the socket's send timeout; returns the one it had."""
    with socket.socket(fileno=os.dup(fd)) as view:
        before = view.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, len(value))
        view.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    return before


def _is_loopback(peer: Any) -> bool:
    try:
        address = ipaddress.ip_address(peer[0])
    except (TypeError, ValueError, IndexError):
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


async def _send_on_loop(out: int, fd: int, start: int, length: int) -> int:
    """The same on the event loop, when every sending thread is taken."""
    loop = asyncio.get_running_loop()
    sent = 0
    while sent < length:
        try:
            n = os.sendfile(out, fd, start + sent, min(length - sent, SENDFILE_MAX))
        except BlockingIOError:
            await _writable(loop, out)
            continue
        except OSError:
            break
        if n == 0:
            break
        sent += n
    return sent


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, head: bool) -> None:
    if status not in (304, 416) or body:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body, "more_body": False})


def _not_modified(headers: dict[str, str], etag: str, published_at: datetime) -> bool:
    """RFC 9110: If-None-Match decides when present (weak comparison); else a not-older If-Modified-Since."""
    inm = headers.get("if-none-match")
    if inm is not None:
        tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in tags or etag in tags
    ims = headers.get("if-modified-since")
    if ims is None:
        return False
    try:
        since = parsedate_to_datetime(ims)
    except (TypeError, ValueError, IndexError):
        return False
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    # HTTP dates have whole seconds: the publish time as Last-Modified showed it.
    return published_at.replace(microsecond=0) <= since


def _range(headers: dict[str, str], size: int, etag: str | None) -> tuple[int, int] | str | None:
    """(start, length) of a single satisfiable byte range, "unsatisfiable", or None (send the whole file).

    Several ranges, a malformed header or an If-Range for another version are answered with the whole
    file, as RFC 9110 allows.
    """
    header = headers.get("range")
    if header is None:
        return None
    if_range = headers.get("if-range")
    if if_range is not None and (etag is None or if_range.strip() != etag):
        return None
    match = _RANGE.match(header.strip())
    if match is None or (not match.group(1) and not match.group(2)):
        return None
    first, last = match.group(1), match.group(2)
    if not first:  # a suffix: the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), min(n, size)
    start = int(first)
    if start >= size:
        return "unsatisfiable"
    end = min(int(last), size - 1) if last else size - 1
    if end < start:
        return None
    return start, end - start + 1


def _accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "x-gzip", "*"):
            q = params.strip().lower()
            if q.startswith("q="):
                try:
                    return float(q[2:]) > 0
                except ValueError:
                    return False
            return True
    return False
