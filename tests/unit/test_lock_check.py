"""The lock check (tools/check_lock.py) catches a dependency that pyproject.toml changed without a new lock."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check_lock():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("check_lock", ROOT / "tools" / "check_lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = """celery==5.5.0 \\
    --hash=sha256:00
    # via firefeed
kombu==5.5.1 ; python_version >= '3.11' \\
    --hash=sha256:11
"""


def test_the_repository_locks_match_pyproject() -> None:
    assert _check_lock().main() == 0


def test_a_requirement_missing_from_the_lock_is_named(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(LOCK)
    assert _check_lock().problems(lock, ["celery[redis]>=5.4", "lxml>=5"]) == [
        "requirements.lock: lxml is in pyproject.toml but not locked"
    ]


def test_a_pin_outside_the_specifier_is_named(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(LOCK)
    assert _check_lock().problems(lock, ["kombu>=5.6", "celery>=5.4"]) == [
        "requirements.lock: kombu==5.5.1 does not satisfy >=5.6"
    ]
