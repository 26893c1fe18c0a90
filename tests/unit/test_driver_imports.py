"""The core (steps, driver, job execution, runs, rules ...) runs without Celery: only firefeed/tasks/ imports it."""

from __future__ import annotations

import subprocess
import sys

# Every module of these packages, imported in a fresh interpreter.
_CODE = """
import importlib, pkgutil, sys
CORE = ("pipeline", "runs", "rules", "spec", "schema", "export", "storage", "db", "processes", "preview", "secrets")
names = ["firefeed.config", "firefeed.errors", "firefeed.metrics", "firefeed.logging", "firefeed.concurrency"]
for pkg in CORE:
    mod = importlib.import_module("firefeed." + pkg)
    names += [info.name for info in pkgutil.walk_packages(mod.__path__, prefix=mod.__name__ + ".")
              if ".migrations" not in info.name]
for name in names:
    importlib.import_module(name)
assert "firefeed.pipeline.driver" in sys.modules and "firefeed.pipeline.rule_passes" in sys.modules
print(sorted(m for m in sys.modules
             if m.split(".")[0] in ("celery", "kombu") or m == "firefeed.celery_app" or m.startswith("firefeed.tasks")))
"""


def test_importing_every_core_module_imports_no_celery_kombu_or_task_module() -> None:
    out = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
