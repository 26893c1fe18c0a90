"""Tests that need to see the parser child processes staging starts (firefeed.pipeline.parse._child)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from firefeed.pipeline.parse import _child


def record_parser_children(monkeypatch: pytest.MonkeyPatch, *, always: bool) -> list[subprocess.Popen[bytes]]:
    """Collect every parser process started from now on; `always` forces one for any feed, else never."""
    started: list[subprocess.Popen[bytes]] = []
    spawn = _child._spawn

    def recording(*args: Any) -> subprocess.Popen[bytes] | None:
        proc = spawn(*args)
        if proc is not None:
            started.append(proc)
        return proc

    monkeypatch.setattr(_child, "_spawn", recording)
    monkeypatch.setattr(_child, "PROCESS_MIN_BYTES", 0 if always else 1 << 62)
    return started
