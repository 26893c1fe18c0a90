"""The feed URL's file sending (firefeed/feeds/http.py): a blocking sendfile on the transport's socket that
gives the socket back as it found it, and leaves a client that reads nothing."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from firefeed.feeds import http


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "feed.xml"
    path.write_bytes(os.urandom(1 << 20) * 24)  # 24 MiB: more than any socket buffer takes
    return path


def _timeout(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.calcsize("ll"))


def test_sends_everything_and_gives_the_socket_back_non_blocking(big_file: Path) -> None:
    server, client = socket.socketpair()
    server.setblocking(False)
    before = _timeout(server)
    got = bytearray()

    def read() -> None:
        while chunk := client.recv(1 << 20):
            got.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    fd = os.open(big_file, os.O_RDONLY)
    try:
        out = os.dup(server.fileno())
        sent = http._send_blocking(out, fd, 5, big_file.stat().st_size - 5)
        os.close(out)
    finally:
        os.close(fd)
    assert fcntl.fcntl(server.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK, "the event loop's socket must stay non-blocking"
    assert _timeout(server) == before
    server.close()
    reader.join(10)
    assert sent == big_file.stat().st_size - 5
    assert bytes(got) == big_file.read_bytes()[5:]
    client.close()


def test_a_client_that_reads_nothing_is_left_after_the_idle_time(
    big_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "SEND_IDLE_S", 1)
    server, client = socket.socketpair()
    server.setblocking(False)
    fd = os.open(big_file, os.O_RDONLY)
    try:
        out = os.dup(server.fileno())
        sent = http._send_blocking(out, fd, 0, big_file.stat().st_size)
        os.close(out)
    finally:
        os.close(fd)
    assert 0 < sent < big_file.stat().st_size
    assert fcntl.fcntl(server.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
    server.close()
    client.close()


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        (("127.0.0.1", 5000), True),
        (("127.8.0.3", 5000), True),
        (("::1", 5000, 0, 0), True),
        (("::ffff:127.0.0.1", 5000, 0, 0), True),
        (("10.0.0.7", 5000), False),
        (("2001:db8::1", 5000, 0, 0), False),
        (None, False),
        ("/run/api.sock", False),
    ],
)
def test_only_a_loopback_peer_gets_the_small_send_buffer(peer: object, loopback: bool) -> None:
    assert http._is_loopback(peer) is loopback


def test_a_stream_through_uvicorn_sends_without_nodelay_and_puts_it_back(big_file: Path) -> None:
    """Through a real uvicorn server on loopback: the file goes whole, with the loopback send buffer and
    TCP_NODELAY off meanwhile; the connection has TCP_NODELAY again for the answers after it."""
    import time

    import httpx
    import uvicorn

    from firefeed.feeds.files import OpenFile

    size = big_file.stat().st_size
    seen: dict[str, int] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        sock = send.__self__.transport.get_extra_info("socket")
        seen["nodelay_before"] = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        fd = os.open(big_file, os.O_RDONLY)
        try:
            headers = [(b"content-length", str(size).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await http._stream(send, OpenFile(size=size, published=None, _fd=fd), 0, size, head=False)
        finally:
            os.close(fd)
        seen["nodelay_after"] = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        seen["sndbuf"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        with httpx.Client(timeout=30) as client:
            body = client.get(f"http://127.0.0.1:{port}/").content
            again = client.get(f"http://127.0.0.1:{port}/").content  # the same keep-alive connection
    finally:
        server.should_exit = True
        thread.join(10)
    assert body == again == big_file.read_bytes()
    assert seen["nodelay_before"] and seen["nodelay_after"], "uvicorn's TCP_NODELAY must be back after the file"
    assert seen["sndbuf"] == 2 * http.LOOPBACK_SNDBUF  # Linux doubles what is set, for its bookkeeping
