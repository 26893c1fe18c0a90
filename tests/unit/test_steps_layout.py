"""The steps package reads as the driver's step list: one module per step, its names re-exported."""

from __future__ import annotations

import importlib
import inspect

import firefeed.pipeline.steps as steps
from firefeed.runs.contract import Step


def test_each_step_of_a_run_has_its_module_in_pipeline_steps() -> None:
    for step in Step:
        module = importlib.import_module(f"firefeed.pipeline.steps.{step.value.lower()}")
        assert module.__doc__ and module.__doc__.startswith(step.value), step


def test_the_package_re_exports_the_functions_of_its_modules_not_copies() -> None:
    for name in steps.__all__:
        value = getattr(steps, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            home = importlib.import_module(value.__module__)
            assert getattr(home, name) is value, name
            assert value.__module__.startswith(("firefeed.pipeline.steps.", "firefeed.dataplane.")), name
    # What other packages import from here (deliveries, preview, publishing, stale, the jobs).
    for name in ("fetch_settings", "export_key", "cleanup", "drop_unnamed_tables", "merge", "read_once"):
        assert callable(getattr(steps, name)), name
