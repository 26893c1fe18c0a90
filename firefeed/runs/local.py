"""Runs without a broker: the API on the embedded default drives its own runs, one at a time.

With no FIREFEED_BROKER_URL there is no worker anywhere to take a root task (Celery's in-memory
broker only serves the process that sent to it), so a run the API accepted would stay PENDING
and hold its project for good. Instead the API hands the committed run to one thread of its own,
which drives it like `firefeed run` does (the same lock, driver and RunReport). PENDING runs left
by an earlier API process are taken up again at start: without a broker no one else can run them.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy import select
from sqlalchemy.engine import Engine

from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import PipelineRun

log = logging.getLogger(__name__)


class LocalRunner:
    """One thread that drives the runs handed to it, in the order they were handed over."""

    def __init__(self, engine: Engine | None = None) -> None:
        self._engine = engine
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="firefeed-run")
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, run_id: str) -> Future[None]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the local runner was shut down")
            return self._pool.submit(self._drive, run_id)

    def resume_pending(self) -> list[str]:
        """Hand over the runs still PENDING (an earlier process accepted them and stopped)."""
        with session_factory(self._engine or get_engine())() as s:
            pending = [
                str(r)
                for r in s.scalars(
                    select(PipelineRun.id).where(PipelineRun.status == "PENDING").order_by(PipelineRun.requested_at)
                )
            ]
        for run_id in pending:
            self.submit(run_id)
        return pending

    def shutdown(self, wait: bool = True) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    def _drive(self, run_id: str) -> None:
        from firefeed.pipeline.run import execute_run

        try:
            execute_run(run_id, engine=self._engine)
        except Exception:  # the driver records its own failures; this is a bug or a lost database
            log.exception("run %s could not be driven in this process", run_id)
