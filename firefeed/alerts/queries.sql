-- run_end --
-- What a run's end needs to decide its alert: the run, its project's alerts, and the run before it
SELECT r.status, r.company_id, r.project_id, r.error,
       COALESCE(v.spec, p.spec) -> 'alerts' AS alerts,
       (SELECT prev.status FROM pipeline_runs prev
         WHERE prev.project_id = r.project_id AND prev.id <> r.id AND prev.requested_at <= r.requested_at
           AND prev.status IN ('SUCCEEDED', 'FAILED')
         ORDER BY prev.requested_at DESC LIMIT 1) AS previous_status
  FROM pipeline_runs r
  JOIN projects p ON p.id = r.project_id
  LEFT JOIN spec_versions v ON v.id = r.spec_version_id
 WHERE r.id = %(run_id)s::uuid;

-- record --
-- One alert into the outbox; nothing when the run's end already recorded it (a second call of its end)
INSERT INTO alert_deliveries (company_id, project_id, run_id, event, export, url, secret_name, body)
VALUES (%(company)s, %(project)s, %(run_id)s::uuid, %(event)s, %(export)s, %(url)s, %(secret)s, %(body)s)
ON CONFLICT ON CONSTRAINT uq_alert_deliveries_once DO NOTHING
RETURNING id;

-- claim --
-- Take a due alert for one attempt: the lease keeps other senders off it and lets it be retried if this one dies
UPDATE alert_deliveries
   SET attempts = attempts + 1, last_attempt_at = now(),
       next_attempt_at = now() + make_interval(secs => %(lease_s)s::float8)
 WHERE id = %(id)s AND status = 'pending' AND next_attempt_at <= now()
RETURNING id, company_id, project_id, run_id, event, url, secret_name, body, attempts;

-- state --
-- An alert's status and the seconds until it may be sent (negative: due)
SELECT status, EXTRACT(EPOCH FROM next_attempt_at - now())::float8 AS wait_s FROM alert_deliveries WHERE id = %(id)s;

-- delivered --
-- The attempt was answered 2xx
UPDATE alert_deliveries SET status = 'delivered', outcomes = outcomes || %(outcome)s::jsonb WHERE id = %(id)s;

-- failed --
-- The attempt was refused for good (a host the rules refuse, a 4xx): no more attempts
UPDATE alert_deliveries SET status = 'failed', outcomes = outcomes || %(outcome)s::jsonb WHERE id = %(id)s;

-- retry --
-- The attempt failed: the next one after the backoff, or none once that passes the alert's retry time
UPDATE alert_deliveries
   SET status = CASE WHEN now() + make_interval(secs => %(delay_s)s::float8)
                          > created_at + make_interval(secs => %(retry_for_s)s::float8)
                     THEN 'failed' ELSE 'pending' END,
       next_attempt_at = now() + make_interval(secs => %(delay_s)s::float8),
       outcomes = outcomes || %(outcome)s::jsonb
 WHERE id = %(id)s
RETURNING status;

-- due --
-- Pending alerts whose time has come, oldest first (beat's sweep and a batch process's thread)
SELECT id FROM alert_deliveries
 WHERE status = 'pending' AND next_attempt_at <= now() AND (%(project)s::text IS NULL OR project_id = %(project)s)
 ORDER BY next_attempt_at LIMIT %(limit)s;

-- recent --
-- A project's latest alerts with their attempts, newest first (`firefeed alerts PROJECT`; the API names the company)
SELECT id, run_id, event, export, url, status, attempts, created_at, last_attempt_at, next_attempt_at, outcomes
  FROM alert_deliveries
 WHERE project_id = %(project)s AND (%(company)s::text IS NULL OR company_id = %(company)s)
 ORDER BY created_at DESC, id DESC LIMIT %(limit)s;
