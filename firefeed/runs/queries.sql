-- Every statement the job store (firefeed/runs/jobs.py) sends, as named blocks (loader: firefeed/db/sqlfile.py).
-- A block starts with `-- name --` and a one-line description; parameters are psycopg2 `%(name)s`.
-- Times are the database's clock: a lease is judged the same way from any machine.

-- create_jobs --
-- A step's jobs in one statement, idempotent per run/kind/pass/idx (a second create only refreshes the params)
INSERT INTO pipeline_jobs (run_id, step, kind, idx, pass_no, params, status)
SELECT %(run_id)s::uuid, j.step, j.kind, j.idx, j.pass_no, j.params, 'PENDING'
  FROM unnest(%(steps)s::text[], %(kinds)s::text[], %(idxs)s::int[], %(pass_nos)s::int[], %(params)s::jsonb[])
       AS j(step, kind, idx, pass_no, params)
    ON CONFLICT (run_id, kind, pass_no, idx) DO UPDATE SET params = EXCLUDED.params
RETURNING id, kind, pass_no, idx;

-- get_job --
-- One job row
SELECT id, run_id, kind, idx, pass_no, status, params, result, error, claimed_at, heartbeat_at, created_at, attempts
  FROM pipeline_jobs
 WHERE id = %(id)s;

-- job_states --
-- Several job rows (the caller puts them back in its order)
SELECT id, run_id, kind, idx, pass_no, status, params, result, error, claimed_at, heartbeat_at, created_at, attempts
  FROM pipeline_jobs
 WHERE id = ANY(%(ids)s);

-- claim_job --
-- PENDING -> RUNNING, or take over a RUNNING job whose claimer stopped beating for a lease; no row: not ours
UPDATE pipeline_jobs
   SET status = 'RUNNING',
       claimed_by = %(claimed_by)s,
       claimed_at = now(),
       heartbeat_at = now(),
       attempts = attempts + 1
 WHERE id = %(id)s
   AND (status = 'PENDING'
        OR (status = 'RUNNING' AND heartbeat_at < now() - make_interval(secs => %(lease_s)s)))
RETURNING id, run_id, kind, idx, pass_no, status, params, result, error, claimed_at, heartbeat_at, created_at, attempts;

-- heartbeat_job --
-- The job's worker is alive
UPDATE pipeline_jobs SET heartbeat_at = now() WHERE id = %(id)s;

-- save_partial --
-- A result so far (a source's FETCH part), which is also a heartbeat
UPDATE pipeline_jobs SET result = %(result)s::jsonb, heartbeat_at = now() WHERE id = %(id)s;

-- succeed_job --
-- Done, only while this worker still holds the job (no row: another worker took it over)
UPDATE pipeline_jobs
   SET status = 'SUCCEEDED', result = %(result)s::jsonb, finished_at = now()
 WHERE id = %(id)s
   AND status = 'RUNNING'
   AND claimed_by = %(claimed_by)s;

-- fail_job --
-- A failure, only while this worker holds the job: one that lost its claim (its backend ended by the attempt
-- that took over) must not fail the new holder's attempt, nor undo its SUCCEEDED
UPDATE pipeline_jobs
   SET status = 'FAILED', error = %(error)s::jsonb, finished_at = now()
 WHERE id = %(id)s
   AND (status = 'PENDING' OR (status = 'RUNNING' AND claimed_by = %(claimed_by)s));

-- cancel_job --
-- A job that will not run (its run was cancelled or its step failed)
UPDATE pipeline_jobs SET status = 'CANCELLED', finished_at = now() WHERE id = %(id)s;

-- cancel_pending --
-- A run's queued jobs, so a worker that gets one later skips it
UPDATE pipeline_jobs
   SET status = 'CANCELLED', finished_at = now()
 WHERE run_id = %(run_id)s::uuid
   AND status = 'PENDING'
RETURNING id;

-- status_counts --
-- How many of the jobs are in each status: one small row set, however many jobs are watched
SELECT status, count(*) AS n FROM pipeline_jobs WHERE id = ANY(%(ids)s) GROUP BY status;

-- stale_running --
-- Jobs RUNNING whose claimer stopped beating for longer than the lease (its worker died)
SELECT id
  FROM pipeline_jobs
 WHERE id = ANY(%(ids)s)
   AND status = 'RUNNING'
   AND heartbeat_at < now() - make_interval(secs => %(lease_s)s)
 ORDER BY id;

-- running_count --
-- A run's jobs still RUNNING (a failed run waits for them to stop)
SELECT count(*) AS n FROM pipeline_jobs WHERE run_id = %(run_id)s::uuid AND status = 'RUNNING';

-- cancel_requested --
-- Whether a cancel of the run was recorded (the driver asks at every step and every watch poll)
SELECT cancel_requested FROM pipeline_runs WHERE id = %(run_id)s::uuid;

-- step_started --
-- A step of the run's timeline begins (again, if a resent step starts over); the run beats with it
WITH step AS (
    INSERT INTO pipeline_steps (run_id, step, status, started_at)
    VALUES (%(run_id)s::uuid, %(step)s, 'RUNNING', %(at)s)
    ON CONFLICT (run_id, step) DO UPDATE SET status = 'RUNNING', started_at = EXCLUDED.started_at, finished_at = NULL
)
UPDATE pipeline_runs SET heartbeat_at = now() WHERE id = %(run_id)s::uuid;

-- step_finished --
-- A step of the run's timeline ends; its start comes back for the step-duration metric
UPDATE pipeline_steps
   SET status = %(status)s, finished_at = %(at)s, rows_in = %(rows_in)s, rows_out = %(rows_out)s,
       detail = %(detail)s::jsonb
 WHERE run_id = %(run_id)s::uuid AND step = %(step)s
RETURNING started_at;

-- finish_run --
-- The run ends: its status, report and error; a step still RUNNING did not finish. The status before comes
-- back (locked), so the run-finished metric counts a run once although its driver finishes it twice
WITH before AS (
    SELECT status, trigger, started_at FROM pipeline_runs WHERE id = %(run_id)s::uuid FOR UPDATE
), run AS (
    UPDATE pipeline_runs
       SET status = %(status)s, finished_at = now(), report = %(report)s::jsonb, error = %(error)s::jsonb
     WHERE id = %(run_id)s::uuid
), steps AS (
    UPDATE pipeline_steps SET status = %(status)s, finished_at = now()
     WHERE run_id = %(run_id)s::uuid AND status = 'RUNNING'
)
SELECT status, trigger, started_at FROM before;

-- save_report --
-- The RunReport of a run that has ended (built from the rows finish_run wrote)
UPDATE pipeline_runs SET report = %(report)s::jsonb WHERE id = %(run_id)s::uuid;

-- record_publishing --
-- A run's commit point (#47): its EXPORT step succeeds and the [partial, published] key pairs it switches are
-- recorded, in one statement, before the first switch. No row: the run ended or a cancel came first
WITH run AS (
    UPDATE pipeline_runs SET publishing = %(moves)s::jsonb, heartbeat_at = now()
     WHERE id = %(run_id)s::uuid AND status = 'RUNNING' AND NOT cancel_requested
    RETURNING id
), step AS (
    UPDATE pipeline_steps
       SET status = 'SUCCEEDED', finished_at = now(), rows_in = %(rows_in)s, rows_out = %(rows_out)s,
           detail = %(detail)s::jsonb
     WHERE run_id IN (SELECT id FROM run) AND step = 'EXPORT'
)
SELECT id FROM run;

-- recorded_publishing --
-- The switch a RUNNING run recorded, when its heartbeat is older than %(stale)s seconds (NULL: whatever its age)
SELECT publishing FROM pipeline_runs
 WHERE id = %(run_id)s::uuid AND status = 'RUNNING' AND publishing IS NOT NULL
   AND (%(stale)s::float8 IS NULL OR heartbeat_at < now() - make_interval(secs => %(stale)s::float8));

-- finish_published --
-- A run whose recorded switch is complete ends SUCCEEDED, once: no row when it had already ended
UPDATE pipeline_runs SET status = 'SUCCEEDED', finished_at = now(), error = NULL
 WHERE id = %(run_id)s::uuid AND status = 'RUNNING' AND publishing IS NOT NULL
RETURNING trigger, started_at, finished_at;
