"""Step job tasks: each claims one job row and runs it (firefeed.<area>.<verb>, routed by area)."""

from __future__ import annotations

from firefeed.celery_app import app

# Step jobs are claimed through their row and record their result with their effect, so a
# redelivered job is harmless: ack after the work, and hand a job lost with its worker to another.
# Their outcome is the job row, so Celery stores no result.
STEP_TASK = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}


def _run(job_id: int) -> None:
    from firefeed.pipeline.jobs import run_job

    run_job(int(job_id))


@app.task(name="firefeed.import.source", **STEP_TASK)
def source(job_id: int) -> None:
    """FETCH and PARSE one source into its staging table."""
    _run(job_id)


@app.task(name="firefeed.import.merge", **STEP_TASK)
def merge(job_id: int) -> None:
    """MERGE the staged sources into the project's items table."""
    _run(job_id)


@app.task(name="firefeed.rules.apply", **STEP_TASK)
def apply(job_id: int) -> None:
    """Apply the project's rules."""
    _run(job_id)


@app.task(name="firefeed.rules.chunk", **STEP_TASK)
def chunk(job_id: int) -> None:
    """Apply one pass of the rules to one chunk of items."""
    _run(job_id)


@app.task(name="firefeed.export.write", **STEP_TASK)
def write(job_id: int) -> None:
    """Write one export next to its published name."""
    _run(job_id)


@app.task(name="firefeed.export.deliver", **STEP_TASK)
def deliver(job_id: int) -> None:
    """Hand one published export to one delivery target (SPEC 10 C7)."""
    _run(job_id)


@app.task(name="firefeed.sync.send", **STEP_TASK)
def sync(job_id: int) -> None:
    """Send one published export's changes to its channel's API, from its ledger (SPEC 10 C9-C10)."""
    _run(job_id)


#: the step tasks, whose one argument is a job row's id (their log lines carry its run: tasks/signals.py)
STEP_TASK_NAMES = frozenset(t.name for t in (source, merge, apply, chunk, write, deliver, sync))
