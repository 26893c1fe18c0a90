"""Small process helpers shared by the embedded database and the worker metrics."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (one we may not signal still counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
