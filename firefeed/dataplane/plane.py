"""The data plane a run works on: the Postgres engine of its company's data, the SchemaService that writes
its DDL, and the owners of the run's tables and views.

Today every company's data is on the control database's server, so `DataPlane.of(engine)` takes the
same engine; RunContext carries it apart from the control-plane stores (`RunContext.control`) so that
a later issue can place a company's data on another server by building this from another engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from firefeed.dataplane.run_tables import RunTables
from firefeed.dataplane.views import RunViews
from firefeed.schema.service import SchemaService


@dataclass(frozen=True)
class DataPlane:
    """Where a company's items, staging, pass and export tables live, and who makes and drops them."""

    engine: Engine
    schema: SchemaService
    tables: RunTables = field(init=False)
    views: RunViews = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", RunTables(self.schema))
        object.__setattr__(self, "views", RunViews(self.schema))

    @classmethod
    def of(cls, engine: Engine) -> DataPlane:
        """The data plane on `engine` (the SchemaService's DDL and catalog queries go there too)."""
        return cls(engine, SchemaService(engine))
