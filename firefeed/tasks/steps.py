"""Step job tasks: each claims one job row and runs it (firefeed.<area>.<verb>, routed by area)."""

from __future__ import annotations

from firefeed.celery_app import app


def _run(job_id: int) -> None:
    from firefeed.pipeline.orchestrator import run_job

    run_job(int(job_id))


@app.task(name="firefeed.import.source")
def source(job_id: int) -> None:
    """FETCH and PARSE one source into its staging table."""
    _run(job_id)


@app.task(name="firefeed.import.merge")
def merge(job_id: int) -> None:
    """MERGE the staged sources into the project's items table."""
    _run(job_id)


@app.task(name="firefeed.rules.apply")
def apply(job_id: int) -> None:
    """Apply the project's rules."""
    _run(job_id)


@app.task(name="firefeed.export.write")
def write(job_id: int) -> None:
    """Write one export next to its published name."""
    _run(job_id)
