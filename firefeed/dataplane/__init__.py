"""The data plane: the tables a run makes, and what a project keeps between runs.

A run's work happens in Postgres tables of the company's schema. This package owns
them: their plan (which staging, merged and ``rules_tmp_*`` pass tables a run
needs and under which names), the views that publish a run's result, and their
drops when the run ends. It also owns what a project keeps between runs (item
fingerprints, source digests, published keys per export), so that a refresh can
cost what changed.

Why apart from ``firefeed/schema/``: the SchemaService stays the home of company
schemas, project tables, added columns and the DDL itself (SPEC 1 names it: pass
tables are created through it); the data plane decides *what* a run creates and
drops and calls the SchemaService to do it. ``pipeline/`` stands on this package,
and ``RunContext.data`` carries it apart from the control-plane stores, so that a
later issue can put companies on several Postgres servers.

- names.py: the names of a run's tables (pass, groups, export diff, kept result), each carrying its run id;
- passes.py: how pass tables are numbered (parts, the result view, an export's own rules);
- run_tables.py: RunTables, a run's tables listed and dropped (at its end, or by the janitor);
- views.py: RunViews, pass views and views of parts, and what a reader learns from them;
- kept.py: the rules result a succeeded run keeps for `firefeed values`;
- plane.py: DataPlane, what RunContext.data carries (engine, SchemaService, tables, views);
- state.py: what a project keeps between runs (sources' digests, lookups', published files).
- staged.py: an enrich source's staged rows as they were before its last parse, kept for the delta.

Nothing here imports this package's modules at import time: schema/service.py imports names.py,
and the modules above import the SchemaService.
"""
