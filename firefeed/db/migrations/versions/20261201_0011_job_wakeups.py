"""job wakeups: a change of a job's status or result notifies its run's channel

The run driver waited for a step's jobs by polling their rows, first every few
milliseconds, then every 50 ms: most of a small run's CPU went into those polls,
and a step's end was seen up to a poll late. Now a trigger sends
`pg_notify('ff_run_<run id without dashes>', '')` when a job's status or result
changes, and when a cancel of the run is recorded; the driver LISTENs on its
run's channel and reads the rows when told (firefeed/runs/wakeups.py). The
notification is delivered at commit, so the rows the driver then reads are the
new ones. Heartbeats change neither and notify no one.

Revision ID: 20261201_0011
Revises: 20261201_0010
Create Date: 2026-12-01 14:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "20261201_0011"
down_revision: str | None = "20261201_0010"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION firefeed_notify_run(run uuid) RETURNS void LANGUAGE sql AS $$
            SELECT pg_notify('ff_run_' || replace(run::text, '-', ''), '')
        $$;
        CREATE FUNCTION firefeed_run_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_TABLE_NAME = 'pipeline_jobs' THEN
                PERFORM firefeed_notify_run(NEW.run_id);
            ELSE
                PERFORM firefeed_notify_run(NEW.id);
            END IF;
            RETURN NULL;
        END
        $$;
        CREATE TRIGGER pipeline_jobs_notify
            AFTER UPDATE OF status, result ON pipeline_jobs
            FOR EACH ROW
            WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.result IS DISTINCT FROM NEW.result)
            EXECUTE FUNCTION firefeed_run_changed();
        CREATE TRIGGER pipeline_runs_notify_cancel
            AFTER UPDATE OF cancel_requested ON pipeline_runs
            FOR EACH ROW
            WHEN (NEW.cancel_requested AND NOT OLD.cancel_requested)
            EXECUTE FUNCTION firefeed_run_changed();
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER pipeline_runs_notify_cancel ON pipeline_runs;
        DROP TRIGGER pipeline_jobs_notify ON pipeline_jobs;
        DROP FUNCTION firefeed_run_changed();
        DROP FUNCTION firefeed_notify_run(uuid);
        """
    )
