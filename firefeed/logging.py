"""Structured logs where every line written for a run carries its run id, project, company and step.

The run context lives in a contextvar set by the pipeline drivers, so any
module's plain `logging.getLogger(__name__)` lines get it without passing it around.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_run_ctx: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("firefeed_run", default=None)
CONTEXT_KEYS = ("run_id", "project", "company", "step", "job")


@contextmanager
def run_context(**values: str | None) -> Iterator[None]:
    """Attach run fields to every log line written inside the block (nested blocks add to them)."""
    merged = {**(_run_ctx.get() or {}), **{k: v for k, v in values.items() if v is not None}}
    token = _run_ctx.set(merged)
    try:
        yield
    finally:
        _run_ctx.reset(token)


def current_context() -> dict[str, str]:
    return dict(_run_ctx.get() or {})


class RunContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _run_ctx.get() or {}
        for key in CONTEXT_KEYS:
            if not hasattr(record, key):
                setattr(record, key, ctx.get(key, "-"))
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            doc[key] = getattr(record, key, "-")
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


TEXT_FORMAT = (
    "%(asctime)s %(levelname)s %(name)s run_id=%(run_id)s project=%(project)s step=%(step)s job=%(job)s %(message)s"
)


def setup_logging(level: str = "INFO", json_lines: bool = False) -> None:
    """Install the run-context filter and formatter on the root logger (idempotent)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in root.handlers:
        if getattr(handler, "_firefeed", False):
            return
    handler = logging.StreamHandler()
    handler._firefeed = True  # type: ignore[attr-defined]
    handler.addFilter(RunContextFilter())
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
