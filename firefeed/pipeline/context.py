"""What every step of a run works with: the run's spec and settings, the control plane and the data plane.

The two planes are kept apart: `ctx.control` holds the control database's stores (the run's row,
steps and sources, its jobs), `ctx.data` the company's data (firefeed/dataplane: engine, SchemaService,
the run's tables and views). Today both are on one Postgres server; a later issue can put companies
on several by building `data` from another engine. A step asks the plane it writes to.

A worker loads a run's context once per job; the spec is parsed once per process
and run (a rules worker runs hundreds of chunk jobs of one run).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from firefeed.config import Settings, get_settings
from firefeed.dataplane.plane import DataPlane
from firefeed.db.engine import get_engine
from firefeed.runs.jobs import JobStore
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import project_table
from firefeed.schema.service import SchemaService
from firefeed.spec.model import ProjectSpec


@dataclass(frozen=True)
class ControlPlane:
    """The control database's stores a run works with: its row, steps and sources (RunStore) and its jobs."""

    engine: Engine
    runs: RunStore
    jobs: JobStore

    @classmethod
    def of(cls, engine: Engine) -> ControlPlane:
        return cls(engine, RunStore(engine), JobStore(engine))


@dataclass
class RunContext:
    run_id: str
    spec: ProjectSpec
    spec_dir: Path | None
    settings: Settings
    control: ControlPlane
    data: DataPlane

    # The names of before the planes were apart, kept for code not moved yet (firefeed/pipeline/incremental.py).
    @property
    def engine(self) -> Engine:
        """The control plane's engine (today also the data plane's): prefer `control.engine` or `data.engine`."""
        return self.control.engine

    @property
    def schema(self) -> SchemaService:
        """`data.schema`."""
        return self.data.schema

    @property
    def store(self) -> RunStore:
        """`control.runs`."""
        return self.control.runs

    def check_cancel(self) -> None:
        """RunCancelledError once a cancel of the run is recorded."""
        self.control.runs.check_cancel(self.run_id)

    @property
    def work_dir(self) -> Path:
        return self.settings.data_dir / "runs" / self.run_id

    @property
    def items_table(self) -> str:
        return project_table(self.spec.project)


_SPECS: OrderedDict[str, tuple[ProjectSpec, Path | None]] = OrderedDict()
_SPECS_LOCK = threading.Lock()
_SPECS_KEPT = 32


def _run_spec(store: RunStore, run_id: str) -> tuple[ProjectSpec, Path | None]:
    """A run's spec snapshot, parsed once per process (it never changes during the run)."""
    with _SPECS_LOCK:
        if run_id in _SPECS:
            _SPECS.move_to_end(run_id)
            return _SPECS[run_id]
    found = store.run_spec(run_id)
    with _SPECS_LOCK:
        _SPECS[run_id] = found
        while len(_SPECS) > _SPECS_KEPT:
            _SPECS.popitem(last=False)
    return found


def load_context(run_id: str, settings: Settings | None = None, engine: Engine | None = None) -> RunContext:
    """The context of a run, from its spec snapshot."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    control = ControlPlane.of(engine)
    spec, spec_dir = _run_spec(control.runs, run_id)
    # One server today: the company's data is on the control database's (see the module's docstring).
    return RunContext(
        run_id=run_id, spec=spec, spec_dir=spec_dir, settings=settings, control=control, data=DataPlane.of(engine)
    )
