"""What every step of a run works with: the run's spec, settings, engine and stores.

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
from firefeed.db.engine import get_engine
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import project_table
from firefeed.schema.service import SchemaService
from firefeed.spec.model import ProjectSpec


@dataclass
class RunContext:
    run_id: str
    spec: ProjectSpec
    spec_dir: Path | None
    settings: Settings
    engine: Engine
    schema: SchemaService
    store: RunStore

    def check_cancel(self) -> None:
        """RunCancelledError once a cancel of the run is recorded."""
        self.store.check_cancel(self.run_id)

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
    store = RunStore(engine)
    spec, spec_dir = _run_spec(store, run_id)
    return RunContext(
        run_id=run_id,
        spec=spec,
        spec_dir=spec_dir,
        settings=settings,
        engine=engine,
        schema=SchemaService(engine),
        store=store,
    )
