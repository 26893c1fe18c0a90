-- Feed URLs (SPEC 10 C4-C5): the statements of firefeed/feeds, one block each.

-- project_exports --
-- The project's company and its current exports in spec order, with the feed id each has (NULL: none yet)
SELECT p.company_id, e.name, e.format, e.path, e.definition::jsonb AS definition, f.feed_id,
       f.last_fetch_at, f.last_fetch_user_agent, f.last_fetch_status
  FROM projects p
  JOIN exports e ON e.project_id = p.id
  LEFT JOIN feed_urls f ON f.project_id = e.project_id AND f.export_name = e.name
 WHERE p.id = %(project_id)s
 ORDER BY e.position;

-- insert_feed_id --
-- A new export's feed id; another process that gave it one first wins (no row then)
INSERT INTO feed_urls (project_id, export_name, feed_id)
VALUES (%(project_id)s, %(export_name)s, %(feed_id)s)
ON CONFLICT (project_id, export_name) DO NOTHING;

-- rotate_feed_id --
-- Replace an export's feed id (creating it when it had none): its old URL stops answering
INSERT INTO feed_urls (project_id, export_name, feed_id)
VALUES (%(project_id)s, %(export_name)s, %(feed_id)s)
ON CONFLICT (project_id, export_name) DO UPDATE SET feed_id = EXCLUDED.feed_id, changed_at = clock_timestamp()
RETURNING feed_id;

-- feeds_version --
-- What API processes compare every second or so: it moves when an id is created or rotated, a spec is applied,
-- a run records a publish or ends one
SELECT (SELECT max(changed_at) FROM feed_urls) AS ids,
       (SELECT max(updated_at) FROM projects) AS specs,
       (SELECT array_agg(id::text ORDER BY id) FROM pipeline_runs
         WHERE status = 'RUNNING' AND publishing IS NOT NULL) AS publishing,
       (SELECT max(finished_at) FROM pipeline_runs WHERE status = 'SUCCEEDED') AS published;

-- feed_index --
-- Every feed id with its export and the export's last two published files (newest first) from the EXPORT step
-- of the runs that recorded a publish (RUNNING ones included: their files may be switched already)
SELECT f.feed_id, f.project_id, p.company_id, f.export_name, e.format, e.path,
       e.definition::jsonb -> 'feed_auth' AS feed_auth,
       pub.sha256, pub.bytes, pub.key, pub.recorded_at, pub.finished_at
  FROM feed_urls f
  JOIN projects p ON p.id = f.project_id
  JOIN exports e ON e.project_id = f.project_id AND e.name = f.export_name
  LEFT JOIN LATERAL (
        SELECT x ->> 'sha256' AS sha256, (x ->> 'bytes')::bigint AS bytes, x ->> 'path' AS key,
               st.finished_at AS recorded_at, r.finished_at, r.requested_at
          FROM pipeline_runs r
          JOIN pipeline_steps st ON st.run_id = r.id AND st.step = 'EXPORT'
         CROSS JOIN LATERAL jsonb_array_elements(st.detail -> 'exports') AS x
         WHERE r.project_id = f.project_id AND r.publishing IS NOT NULL
           AND r.status IN ('RUNNING', 'SUCCEEDED') AND x ->> 'name' = f.export_name
           AND x ->> 'sha256' IS NOT NULL
         ORDER BY r.requested_at DESC
         LIMIT 2
  ) pub ON true
 ORDER BY f.feed_id, pub.requested_at DESC;

-- record_fetch --
-- The last fetch of a feed URL (written at most once per export every few seconds, not per request)
UPDATE feed_urls SET last_fetch_at = %(at)s, last_fetch_user_agent = %(user_agent)s, last_fetch_status = %(status)s
 WHERE feed_id = %(feed_id)s AND (last_fetch_at IS NULL OR last_fetch_at <= %(at)s);

-- project_exists --
-- The project's company (no row: no such project)
SELECT company_id FROM projects WHERE id = %(project_id)s;
