-- Every statement the processes worker sends, as named blocks loaded by _sql.py.
-- A block starts with `-- name --` and a one-line description; parameters are psycopg2 `%(name)s`.

-- table_exists --
-- Whether the processes table is there (the worker refuses to start on an unmigrated database)
SELECT to_regclass('processes') IS NOT NULL AS present;

-- claim_process --
-- Take the oldest pending row of this worker's scope; SKIP LOCKED makes one winner per row among any number of workers
UPDATE processes
   SET status = 'running',
       claimed_by = %(claimed_by)s,
       claimed_at = now(),
       heartbeat_at = now(),
       updated_at = now()
 WHERE id = (
        SELECT id
          FROM processes
         WHERE status = 'pending'
           AND worker_type = %(worker_type)s
           AND workspace_id = %(workspace_id)s
         ORDER BY created_at, id
         LIMIT 1
           FOR UPDATE SKIP LOCKED
       )
-- input_data as text: the worker decodes it itself, so a row Python's JSON reader refuses fails alone
RETURNING id, function, input_data::text AS input_data, attempts;

-- heartbeat_processes --
-- Keep this worker's leases alive; the rows not returned were taken away from it
UPDATE processes
   SET heartbeat_at = now()
 WHERE id = ANY(%(ids)s)
   AND claimed_by = %(claimed_by)s
   AND status = 'running'
RETURNING id;

-- finish_process --
-- Write a row's outcome, only while this worker still holds it
UPDATE processes
   SET status = %(status)s,
       output_data = %(output_data)s,
       error_message = %(error_message)s,
       updated_at = now()
 WHERE id = %(id)s
   AND claimed_by = %(claimed_by)s
   AND status = 'running'
RETURNING id;

-- release_processes --
-- Hand rows this worker will not finish back to pending (graceful shutdown); the trigger wakes the other workers
UPDATE processes
   SET status = 'pending',
       claimed_by = NULL,
       claimed_at = NULL,
       heartbeat_at = NULL,
       updated_at = now()
 WHERE id = ANY(%(ids)s)
   AND claimed_by = %(claimed_by)s
   AND status = 'running'
RETURNING id;

-- recover_stale_processes --
-- Running rows of this scope whose claimer stopped beating: back to pending, or failed once out of attempts
WITH stale AS (
    SELECT id, claimed_by
      FROM processes
     WHERE status = 'running'
       AND worker_type = %(worker_type)s
       AND workspace_id = %(workspace_id)s
       AND heartbeat_at < now() - make_interval(secs => %(lease_s)s)
       FOR UPDATE SKIP LOCKED
)
UPDATE processes AS p
   SET attempts = p.attempts + 1,
       status = CASE WHEN p.attempts + 1 < %(max_attempts)s THEN 'pending' ELSE 'failed' END,
       error_message = CASE WHEN p.attempts + 1 < %(max_attempts)s THEN NULL
           ELSE 'gave up after ' || (p.attempts + 1) || ' claim(s) whose worker stopped heartbeating (last: '
                || coalesce(stale.claimed_by, '?') || ', lease ' || %(lease_s)s || ' s, FIREFEED_PROCESS_MAX_ATTEMPTS='
                || %(max_attempts)s || ')' END,
       claimed_by = CASE WHEN p.attempts + 1 < %(max_attempts)s THEN NULL ELSE p.claimed_by END,
       claimed_at = CASE WHEN p.attempts + 1 < %(max_attempts)s THEN NULL ELSE p.claimed_at END,
       heartbeat_at = CASE WHEN p.attempts + 1 < %(max_attempts)s THEN NULL ELSE p.heartbeat_at END,
       updated_at = now()
  FROM stale
 WHERE p.id = stale.id
RETURNING p.id, p.status, p.attempts, stale.claimed_by AS lost_by;

-- listen --
-- Subscribe to the trigger's wake-ups (payload: the new pending row's worker_type and workspace_id)
LISTEN firefeed_processes;
