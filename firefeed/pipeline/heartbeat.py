"""The heartbeat: a thread that says "still alive" while a long piece of work runs.

A run's driver beats on its run row and a job's worker on its job row; the
reaper (runs/maintenance.py) and the watch loop (pipeline/watch.py) take what
stops beating for longer than FIREFEED_STALE_RUN_S as lost.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Heartbeat:
    """Calls `beat` every `every_s` seconds in a thread for as long as the `with` block runs."""

    def __init__(self, beat: Callable[[], None], every_s: float) -> None:
        self._stop = threading.Event()
        self._beat, self._every = beat, every_s
        # The thread runs in a copy of the caller's context, so its log lines carry the run id too.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._loop,), name="firefeed-heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._beat()
            except Exception:  # a missed beat is not worth failing the work for
                log.warning("heartbeat failed", exc_info=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
