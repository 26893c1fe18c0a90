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
"""
