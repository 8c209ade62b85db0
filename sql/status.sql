-- `orca status`, one row by the database's clock ($1: the lead lock's key,
-- LEAD_LOCK):
-- * the session holding the lead lock: its application_name (NULL when it
--   is another role's, which this role can't see), backend pid, when it
--   began, and how long since its last statement began or ended (a
--   scheduler's tick runs one every tick);
-- * the scheduler row that says it leads (overlap on), newest first: its
--   id, host, pid, since when it leads, and seconds since its last beat;
-- * runs running and queued (through the partial indexes on state), and
--   the queued run due the longest (past any retry delay) and for how long.
SELECT h.application_name AS holder_app, h.backend AS holder_backend,
       h.client_addr AS holder_addr,
       to_char(h.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS holder_since,
       CASE WHEN h.state = 'active' THEN 0
            ELSE extract(epoch FROM now() - h.state_change)::float8 END AS holder_quiet,
       s.id AS leader_id, s.host AS leader_host, s.pid AS leader_pid,
       to_char(s.lead_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS leader_since,
       extract(epoch FROM now() - s.seen_at)::float8 AS leader_seen_ago,
       (SELECT count(*) FROM orca.runs WHERE state = 'running') AS running,
       (SELECT count(*) FROM orca.runs WHERE state = 'queued') AS queued,
       o.id AS oldest_id, o.pipeline AS oldest_pipeline,
       extract(epoch FROM now() - o.due)::float8 AS oldest_waited,
       to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS now
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT a.application_name, a.pid AS backend, a.client_addr::text AS client_addr,
           a.backend_start, a.state, a.state_change
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid
      AND l.objsubid = 1
    LIMIT 1
) h ON true
LEFT JOIN LATERAL (
    SELECT id, host, pid, lead_since, seen_at FROM orca.schedulers
    WHERE ended_at IS NULL AND leads
    ORDER BY seen_at DESC
    LIMIT 1
) s ON true
LEFT JOIN LATERAL (
    SELECT id, pipeline, greatest(queued_at, not_before) AS due FROM orca.runs
    WHERE state = 'queued' AND not_before <= now()
    ORDER BY greatest(queued_at, not_before), id
    LIMIT 1
) o ON true
