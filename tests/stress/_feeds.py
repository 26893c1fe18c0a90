"""A local feed server whose behaviour a test switches: serve, drip slowly, hang, reset, or offer 10 GB.

It counts the bytes it really sent, so a test can prove the size cap stopped a
download early rather than after the whole body.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEN_GB = 10 * 1024**3
_BLOCK = b"x" * 65536


@dataclass
class FeedServer:
    """`mode` is read per request: ok, slow, drip, hang, reset, reset_mid_body, huge_declared, endless."""

    body: bytes = b""
    mode: str = "ok"
    slow_s: float = 3.0
    port: int = 0
    sent: int = 0
    requests: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, name: str = "main.csv") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def count(self, n: int) -> None:
        with self._lock:
            self.sent += n


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the client sees 'connection reset by peer'."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _handler(server: FeedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _write(self, data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()
            server.count(len(data))

        def do_GET(self) -> None:
            with server._lock:
                server.requests += 1
            mode = server.mode
            try:
                if mode == "hang":
                    server.release.wait(120)  # never answers while the test runs
                    return
                if mode == "reset":
                    _reset(self.connection)
                    return
                if mode == "huge_declared":
                    self.send_response(200)
                    self.send_header("Content-Length", str(TEN_GB))
                    self.end_headers()
                    for _ in range(TEN_GB // len(_BLOCK)):
                        self._write(_BLOCK)
                    return
                if mode == "endless":
                    # No Content-Length: only the client's own byte count can stop it.
                    self.send_response(200)
                    self.send_header("Content-Type", "text/csv")
                    self.end_headers()
                    self._write(b"id,title\n")
                    for _ in range(TEN_GB // len(_BLOCK)):
                        self._write(_BLOCK)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/csv")
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                if mode == "reset_mid_body":
                    self._write(server.body[: len(server.body) // 2])
                    _reset(self.connection)
                    return
                if mode == "drip":
                    # One byte at a time, each well inside the client's read timeout: never "timed out".
                    for i in range(len(server.body)):
                        self._write(server.body[i : i + 1])
                        time.sleep(server.slow_s)
                    return
                if mode == "slow":
                    pieces = 20
                    step = max(len(server.body) // pieces, 1)
                    for i in range(0, len(server.body), step):
                        self._write(server.body[i : i + step])
                        time.sleep(server.slow_s / pieces)
                    return
                self._write(server.body)
            except (BrokenPipeError, ConnectionResetError, OSError):
                return  # the client gave up: that is what these tests provoke

    return Handler


@contextmanager
def feed_server(body: bytes = b"") -> Iterator[FeedServer]:
    server = FeedServer(body=body)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        httpd.shutdown()
        httpd.server_close()
