"""A fetch's deadline: the time by which a download must end however slowly its server sends (issue #15).

A preview's fetch gets the preview's deadline; a run's has none (its step time
limit is checked as bytes arrive, see fetch._receive).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import httpx

PAST_DEADLINE = "the fetch did not finish before its deadline"


class FetchWatchdog:
    """Ends a fetch at its `deadline`: shuts down the sockets it opened, which wakes a blocked read at once.

    The per-read timeout restarts with every byte, so it cannot bound a server
    that trickles a byte every few seconds (in the headers or in the body), and
    httpcore fixes a read's timeout when the body starts. The sockets come from
    httpcore's `trace` extension as each connection is made, so the shutdown
    reaches a read blocked in the headers too. Without a deadline it does nothing.
    """

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._fired = False
        self._timer: threading.Timer | None = None
        self.extensions: dict[str, object] = {}
        if deadline is not None:
            self.extensions["trace"] = self._trace
            self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
            self._timer.name = "firefeed-fetch-deadline"
            self._timer.daemon = True

    def __enter__(self) -> FetchWatchdog:
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()

    def timeout(self, seconds: float) -> httpx.Timeout:
        """Connect and read timeouts no longer than the time left (a connect cannot be shut down)."""
        if self.deadline is not None:
            seconds = max(0.001, min(seconds, self.deadline - time.monotonic()))
        return httpx.Timeout(seconds)

    def _trace(self, event: str, info: dict[str, object]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if hasattr(stream, "get_extra_info") else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.append(sock)
                if self._fired:
                    _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to wake
        sock.shutdown(socket.SHUT_RDWR)
