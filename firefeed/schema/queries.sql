-- The SchemaService's catalog queries, as named blocks loaded by firefeed/db/sqlfile.py.
-- A block starts with `-- name --` and a one-line description; parameters are psycopg2 `%(name)s`.
-- DDL is not here: it is built around identifiers (psycopg2.sql) in service.py.

-- table_columns --
-- The columns of one table in their order (add_columns adds only the missing ones)
SELECT column_name
  FROM information_schema.columns
 WHERE table_schema = %(schema)s
   AND table_name = %(table)s
 ORDER BY ordinal_position;

-- table_exists --
-- Whether a table is there; `qualified` is "schema"."table" quoted as text
SELECT to_regclass(%(qualified)s) IS NOT NULL AS present;

-- schemas_like --
-- Schemas whose name matches a LIKE pattern (the scratch areas of rule previews)
SELECT nspname
  FROM pg_namespace
 WHERE nspname LIKE %(pattern)s;

-- database_epoch --
-- The database's clock in Unix seconds, which a scratch area's age is measured against
SELECT extract(epoch FROM now());

-- run_tables --
-- Run-scoped tables (rules_tmp_*, export_tmp_*) of every company: LIKE patterns for schema and table
SELECT schemaname, tablename
  FROM pg_tables
 WHERE schemaname LIKE %(schemas)s
   AND tablename LIKE %(tables)s;

-- run_tables_of_schema --
-- Run-scoped tables of one company schema
SELECT schemaname, tablename
  FROM pg_tables
 WHERE schemaname = %(schema)s
   AND tablename LIKE %(tables)s;

-- run_views --
-- Run-scoped views (rules_tmp_*: a pass computed on read, a view of parts) of every company
SELECT schemaname, viewname
  FROM pg_views
 WHERE schemaname LIKE %(schemas)s
   AND viewname LIKE %(views)s;

-- run_views_of_schema --
-- Run-scoped views of one company schema
SELECT schemaname, viewname
  FROM pg_views
 WHERE schemaname = %(schema)s
   AND viewname LIKE %(views)s;

-- tables_named --
-- Which of these tables exist in one company schema
SELECT tablename
  FROM pg_tables
 WHERE schemaname = %(schema)s
   AND tablename = ANY(%(tables)s);

-- count_run_tables --
-- How many run-scoped tables of every company are alive (the fleet gauge firefeed_rules_tmp_tables)
SELECT count(*)
  FROM pg_tables
 WHERE schemaname LIKE %(schemas)s
   AND tablename LIKE %(tables)s;

-- run_is_live --
-- Whether a run is still PENDING or RUNNING; the share lock keeps it so until the janitor's transaction ends
SELECT 1
  FROM pipeline_runs
 WHERE id = %(run_id)s
   AND status IN ('PENDING', 'RUNNING')
   FOR SHARE;

-- view_tables --
-- The tables and views a view reads (a rules run's view of its parts), with their kinds ('r', 'v');
-- `qualified` is "schema"."view" quoted as text
SELECT DISTINCT c.relname, c.relkind::text
  FROM pg_rewrite r
  JOIN pg_depend d ON d.objid = r.oid
  JOIN pg_class c ON c.oid = d.refobjid
 WHERE r.ev_class = to_regclass(%(qualified)s)
   AND c.oid <> r.ev_class
   AND c.relkind IN ('r', 'v');

-- relation_kind --
-- A relation's kind ('r' a table, 'v' a view; NULL when there is none); `qualified` as above
SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%(qualified)s);

-- kept_results --
-- The rules results a project's succeeded runs kept for `firefeed values` (named result_*, commented with
-- the project), with their kinds ('r', 'v')
SELECT c.relname, c.relkind::text
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s
   AND c.relname LIKE %(pattern)s
   AND c.relkind IN ('r', 'v')
   AND obj_description(c.oid, 'pg_class') = %(comment)s;

-- table_comment --
-- A table's comment (NULL when it has none or there is no table); `qualified` as above
SELECT obj_description(to_regclass(%(qualified)s), 'pg_class');

-- key_comment --
-- The comment on a table's key column `k` (no row: no table); `qualified` as above
SELECT col_description(t.c, a.attnum) FROM (SELECT to_regclass(%(qualified)s) AS c) t
  JOIN pg_attribute a ON a.attrelid = t.c AND a.attname = 'k' AND NOT a.attisdropped;

-- table_pages --
-- How many heap pages a table has (runs of pages are read by TID range scans); `qualified` as above
SELECT pg_relation_size(%(qualified)s::regclass) / current_setting('block_size')::int;
