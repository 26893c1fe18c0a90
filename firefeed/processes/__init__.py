"""The processes-table worker (SPEC section 6): services that don't speak Celery insert a row, FireFeed runs it.

`models.py` is the table, `queries.sql` every statement the worker sends,
`registry.py` the runnables a row may name, `store.py` the row's life cycle
(claim, heartbeat, finish, release, recover) and `worker.py` the daemon loop.
"""
