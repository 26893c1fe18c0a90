-- The sync engine's statements (SPEC 10 C9-C10), as named blocks loaded by firefeed/db/sqlfile.py.
-- A block starts with `-- name --` and a one-line description; parameters are psycopg2 `%(name)s`.
-- `{ledger}` (the export's sync ledger) and `{published}` (its published run table: k, kh, h, f, j)
-- are identifiers, filled in by ledger.py through psycopg2.sql and firefeed/schema/identifiers.py.
--
-- Channel ids: an item goes to the channel under the export's `id` value (the `%(id_at)s`-th value of its
-- payload; its key when the export writes no id or an empty one), as the export's file names it. The ledger keeps
-- the id each row's operation sends in `cid` (NULL: the key, as every item was sent before #51). A row whose `k`
-- starts with U+001F is not an item: it deletes a channel id no item uses any longer (`cid`), after an item moved
-- to another id, or a repair's orphan.

-- published_index --
-- The published table is read by key, a block of keys at a time: an index on k (dropped with the table)
CREATE INDEX IF NOT EXISTS {index} ON {published} (k);

-- plan_unretire --
-- A channel id to delete that an item of the export uses again (it moved back): not deleted
DELETE FROM {ledger} r
 WHERE left(r.k, 1) = E'\x1f'
   AND EXISTS (SELECT 1 FROM {published} q WHERE q.j IS NOT NULL AND coalesce(nullif(btrim(CASE WHEN %(id_at)s >= 0 THEN q.j ->> %(id_at)s END), ''), q.k) = r.cid);

-- plan_inserts --
-- New items, changed ones (content hash, or channel id), re-added ones, those acked longer ago than the resend age,
-- and those whose last try failed only after every attempt (the channel's trouble, not a refusal: not
-- acknowledged). An item the channel holds under another id than its export's id now (its key, from a ledger made
-- before, or a spec that changed `id`): that id is deleted too, unless another item of the export now uses it
-- (one pass over the export: both inserts read the ledger as it was)
WITH src AS MATERIALIZED (
    SELECT p.k, p.kh, p.h, p.c, o.k AS ok, o.op, o.h AS oh, o.inserted_at, coalesce(o.cid, o.k) AS oc
      FROM (SELECT p.k, p.kh, p.h, coalesce(nullif(btrim(CASE WHEN %(id_at)s >= 0 THEN p.j ->> %(id_at)s END), ''), p.k) AS c FROM {published} p WHERE p.j IS NOT NULL) p
      LEFT JOIN {ledger} o ON o.k = p.k
     WHERE o.k IS NULL
        OR o.op = 'delete'
        OR o.h IS DISTINCT FROM p.h
        OR coalesce(o.cid, o.k) <> p.c
        OR (o.status = 'failed' AND o.attempts >= %(max_attempts)s)
        OR (o.status = 'acked' AND o.acked_at < now() - make_interval(secs => %(resend_s)s))
), retired AS (
    INSERT INTO {ledger} AS l (k, cid, op, kind, status, attempts, planned_at)
    SELECT E'\x1f' || s.oc, s.oc, 'delete', 'delete', 'pending', 0, now() FROM src s
     WHERE s.op = 'insert' AND s.inserted_at IS NOT NULL AND s.oc <> s.c
       AND NOT EXISTS (SELECT 1 FROM {published} q WHERE q.j IS NOT NULL AND coalesce(nullif(btrim(CASE WHEN %(id_at)s >= 0 THEN q.j ->> %(id_at)s END), ''), q.k) = s.oc)
    ON CONFLICT (k) DO UPDATE
       SET op = 'delete', kind = 'delete', status = 'pending', attempts = 0, code = NULL, message = NULL,
           planned_at = now()
)
INSERT INTO {ledger} AS l (k, kh, h, cid, op, kind, status, attempts, code, message, planned_at)
SELECT s.k, s.kh, s.h, s.c, 'insert',
       CASE WHEN s.ok IS NULL OR s.inserted_at IS NULL THEN 'new'
            WHEN s.oh IS DISTINCT FROM s.h OR s.op = 'delete' OR s.oc <> s.c THEN 'changed'
            ELSE 'resend' END,
       'pending', 0, NULL, NULL, now()
  FROM src s
ON CONFLICT (k) DO UPDATE
   SET kh = EXCLUDED.kh, h = EXCLUDED.h, cid = EXCLUDED.cid, op = 'insert', kind = EXCLUDED.kind,
       status = 'pending', attempts = 0, code = NULL, message = NULL, planned_at = now();

-- plan_deletes --
-- Every ledger key the export no longer sends (removed, or left out as invalid) is deleted, a failed delete again;
-- but an item whose channel id another item of the export uses now is forgotten: nothing to delete there
WITH gone AS MATERIALIZED (
    SELECT l.k, l.op, l.status, coalesce(l.cid, l.k) AS c FROM {ledger} l
     WHERE NOT EXISTS (SELECT 1 FROM {published} p WHERE p.k = l.k AND p.j IS NOT NULL)
), shared AS MATERIALIZED (
    SELECT g.k FROM gone g
     WHERE left(g.k, 1) <> E'\x1f'
       AND EXISTS (SELECT 1 FROM {published} q WHERE q.j IS NOT NULL AND coalesce(nullif(btrim(CASE WHEN %(id_at)s >= 0 THEN q.j ->> %(id_at)s END), ''), q.k) = g.c)
), forgotten AS (
    DELETE FROM {ledger} l USING shared s WHERE l.k = s.k
)
UPDATE {ledger} l
   SET op = 'delete', kind = 'delete', status = 'pending', attempts = 0, code = NULL, message = NULL,
       planned_at = now()
  FROM gone g
 WHERE l.k = g.k AND (g.op <> 'delete' OR g.status = 'failed') AND g.k NOT IN (SELECT k FROM shared);

-- reset_sending --
-- Rows left `sending` by a sync that died (this one holds the account's lock): they go out again
UPDATE {ledger} SET status = 'pending' WHERE status = 'sending';

-- claim --
-- Up to n pending operations become `sending` (committed before any request leaves), with their payloads and
-- channel ids; an
-- insert whose published hash is no longer the planned one is `stale` (a newer run published, maybe with other
-- columns: its payload is not this sync's to send)
WITH c AS (
    UPDATE {ledger} l
       SET status = 'sending', attempts = l.attempts + 1, sent_at = now()
     WHERE l.k IN (SELECT k FROM {ledger} WHERE status = 'pending' LIMIT %(n)s FOR UPDATE SKIP LOCKED)
 RETURNING l.k, l.op, l.kind, l.attempts, l.h, coalesce(l.cid, l.k) AS cid
)
SELECT c.k, c.op, c.kind, c.attempts, CASE WHEN c.op = 'insert' AND p.h = c.h THEN p.j END AS j,
       (c.op = 'insert' AND p.k IS NOT NULL AND p.h IS DISTINCT FROM c.h) AS stale, c.cid
  FROM c LEFT JOIN {published} p ON p.k = c.k;

-- answer --
-- The channel's answers: acked or failed, with its code and message, and the optional attributes an acked insert
-- went without (the channel holds none of them); an acked delete's row is dropped after
UPDATE {ledger} l
   SET status = CASE WHEN a.ok THEN 'acked' ELSE 'failed' END,
       code = NULLIF(a.code, ''), message = NULLIF(a.message, ''),
       left_out = CASE WHEN a.ok THEN NULLIF(a.left_out, '')::jsonb ELSE l.left_out END,
       acked_at = CASE WHEN a.ok THEN now() ELSE l.acked_at END,
       inserted_at = CASE WHEN a.ok AND l.op = 'insert' THEN coalesce(l.inserted_at, now())
                          WHEN a.ok THEN NULL ELSE l.inserted_at END
  FROM unnest(%(keys)s::text[], %(oks)s::boolean[], %(codes)s::text[], %(messages)s::text[], %(left_outs)s::text[])
       AS a(k, ok, code, message, left_out)
 WHERE l.k = a.k AND l.status = 'sending'
RETURNING l.k, l.op, l.kind, a.ok;

-- drop_deleted --
-- An acked delete leaves nothing to remember: the channel holds no such item
DELETE FROM {ledger} WHERE k = ANY(%(keys)s) AND op = 'delete' AND status = 'acked';

-- requeue --
-- Operations the channel was too busy to take go back to pending; the try did not count
UPDATE {ledger} SET status = 'pending', attempts = greatest(attempts - %(uncount)s, 0)
 WHERE k = ANY(%(keys)s) AND status = 'sending';

-- counts --
-- The ledger by operation and status
SELECT op, status, count(*) AS n FROM {ledger} GROUP BY op, status;

-- failed_rows --
-- The first failed operations, for `errors` (the delete of an id no item uses any longer: by that id)
SELECT CASE WHEN left(k, 1) = E'\x1f' THEN cid ELSE k END, op, code, message
  FROM {ledger} WHERE status = 'failed' ORDER BY k LIMIT %(n)s;

-- left_out_count --
-- Items the channel holds without an optional attribute FireFeed could not read (as their last acked insert went)
SELECT count(*) FROM {ledger} WHERE op = 'insert' AND left_out IS NOT NULL;

-- left_out_rows --
-- The first of them, one row per attribute left out, with why
SELECT l.k, x ->> 'attribute', x ->> 'message'
  FROM (SELECT k, left_out FROM {ledger}
         WHERE op = 'insert' AND left_out IS NOT NULL ORDER BY k LIMIT %(n)s) l,
       jsonb_array_elements(l.left_out) x
 ORDER BY l.k LIMIT %(n)s;

-- store_issues --
-- The channel's item-level issues of the items it listed ("google says"), by channel id; an item it holds without
-- issues has []
UPDATE {ledger} l SET issues = x.issues, issues_at = now()
  FROM jsonb_to_recordset(%(items)s::jsonb) AS x(k text, issues jsonb)
 WHERE coalesce(l.cid, l.k) = x.k AND l.op = 'insert';

-- clear_unlisted_issues --
-- Items the channel no longer lists have no issues to show
UPDATE {ledger} SET issues = NULL, issues_at = NULL
 WHERE issues IS NOT NULL AND issues_at < %(since)s;

-- issue_codes --
-- How many items the channel reports each issue code for
SELECT x ->> 'code' AS code, count(DISTINCT l.k) AS n
  FROM {ledger} l, jsonb_array_elements(l.issues) x
 WHERE l.issues IS NOT NULL
 GROUP BY 1 ORDER BY 2 DESC, 1;

-- issue_items --
-- Items with channel issues, and how many of those FireFeed's own checks had flagged (the export's flags)
SELECT count(*) AS items, count(*) FILTER (WHERE p.f <> 0) AS flagged
  FROM {ledger} l LEFT JOIN {published} p ON p.k = l.k
 WHERE l.issues IS NOT NULL AND jsonb_array_length(l.issues) > 0;

-- issue_samples --
-- The first items the channel reports issues for, with their issues ("google says" on the page)
SELECT k, issues FROM {ledger}
 WHERE issues IS NOT NULL AND jsonb_array_length(issues) > 0
 ORDER BY k LIMIT %(n)s;

-- repair_remote_table --
-- The keys the channel holds, and whether each matches the export, for `sync repair`
DROP TABLE IF EXISTS pg_temp.sync_remote;
CREATE TEMP TABLE sync_remote (k text PRIMARY KEY, same boolean NOT NULL);

-- repair_remote_add --
-- A page of the channel's keys
INSERT INTO sync_remote (k, same)
SELECT * FROM unnest(%(keys)s::text[], %(same)s::boolean[]) ON CONFLICT (k) DO NOTHING;

-- repair_resend --
-- Items of the export the channel lacks or holds otherwise: pending inserts again (after a plan every item of the
-- export has its row, with the channel id it goes under)
INSERT INTO {ledger} AS l (k, kh, h, cid, op, kind, status, attempts, planned_at)
SELECT p.k, p.kh, p.h, coalesce(o.cid, p.k), 'insert', 'repair', 'pending', 0, now()
  FROM {published} p LEFT JOIN {ledger} o ON o.k = p.k LEFT JOIN sync_remote r ON r.k = coalesce(o.cid, p.k)
 WHERE p.j IS NOT NULL AND (r.k IS NULL OR NOT r.same)
ON CONFLICT (k) DO UPDATE
   SET kh = EXCLUDED.kh, h = EXCLUDED.h, cid = EXCLUDED.cid, op = 'insert', kind = 'repair', status = 'pending',
       attempts = 0, code = NULL, message = NULL, planned_at = now();

-- repair_counts --
-- How many of the export's items the channel lacks, and how many it holds otherwise
SELECT count(*) FILTER (WHERE r.k IS NULL) AS missing, count(*) FILTER (WHERE NOT r.same) AS different
  FROM {published} p LEFT JOIN {ledger} o ON o.k = p.k LEFT JOIN sync_remote r ON r.k = coalesce(o.cid, p.k)
 WHERE p.j IS NOT NULL;

-- repair_orphans --
-- The first n items the channel holds that the export does not send (a catalog may hold millions of them)
SELECT r.k FROM sync_remote r
 WHERE NOT EXISTS (SELECT 1 FROM {ledger} o JOIN {published} p ON p.k = o.k
                    WHERE coalesce(o.cid, o.k) = r.k AND p.j IS NOT NULL)
 ORDER BY r.k LIMIT %(n)s;

-- repair_orphan_count --
-- How many items the channel holds that the export does not send
SELECT count(*) FROM sync_remote r
 WHERE NOT EXISTS (SELECT 1 FROM {ledger} o JOIN {published} p ON p.k = o.k
                    WHERE coalesce(o.cid, o.k) = r.k AND p.j IS NOT NULL);

-- repair_delete_orphans --
-- Orphans to delete (`--delete-orphans`): pending deletes of their channel ids in the ledger
INSERT INTO {ledger} AS l (k, cid, op, kind, status, attempts, planned_at)
SELECT E'\x1f' || r.k, r.k, 'delete', 'delete', 'pending', 0, now() FROM sync_remote r
 WHERE NOT EXISTS (SELECT 1 FROM {ledger} o JOIN {published} p ON p.k = o.k
                    WHERE coalesce(o.cid, o.k) = r.k AND p.j IS NOT NULL)
ON CONFLICT (k) DO UPDATE
   SET op = 'delete', kind = 'delete', status = 'pending', attempts = 0, code = NULL, message = NULL,
       planned_at = now();

-- payloads --
-- The export's payloads of some channel ids (repair compares them with what the channel holds)
SELECT coalesce(o.cid, o.k), p.j FROM {ledger} o JOIN {published} p ON p.k = o.k
 WHERE coalesce(o.cid, o.k) = ANY(%(keys)s) AND p.j IS NOT NULL;

-- state_get --
-- An export's sync state
SELECT target, account, columns, run_id, last_sync_at, last_result, listed_at, channel_issues
  FROM sync_state WHERE project_id = %(project)s AND export_name = %(export)s;

-- state_begin --
-- A sync starts: the account and columns it sends with (a changed account was handled by the caller)
INSERT INTO sync_state (project_id, export_name, target, account, columns, run_id)
VALUES (%(project)s, %(export)s, %(target)s, %(account)s, %(columns)s::jsonb, CAST(%(run_id)s AS uuid))
ON CONFLICT (project_id, export_name) DO UPDATE
   SET target = EXCLUDED.target, account = EXCLUDED.account, columns = EXCLUDED.columns,
       run_id = coalesce(EXCLUDED.run_id, sync_state.run_id);

-- state_end --
-- A sync ended: its outcome and time
UPDATE sync_state SET last_sync_at = now(), last_result = %(result)s::jsonb
 WHERE project_id = %(project)s AND export_name = %(export)s;

-- state_listed --
-- The channel was listed: its issue summary and time
UPDATE sync_state SET listed_at = now(), channel_issues = %(issues)s::jsonb
 WHERE project_id = %(project)s AND export_name = %(export)s;

-- account_lock --
-- One sync per channel account at a time (the quota is the account's): a session lock on its name
SELECT pg_try_advisory_lock(hashtextextended('firefeed-sync:' || %(account)s, 0));

-- account_unlock --
-- The account's lock, given back
SELECT pg_advisory_unlock(hashtextextended('firefeed-sync:' || %(account)s, 0));
