-- Ends the session holding LEAD_LOCK ($1) if it belongs to a scheduler
-- scheduler that is gone (ended, or not seen within $2 s): a hung or cut-off
-- leader can't hold the lead forever. Waits up to 2 s for it to end.
-- Returns the scheduler whose session was ended.
SELECT s.id, pg_terminate_backend(l.pid, 2000) AS ended
FROM pg_locks l
JOIN orca.schedulers s ON s.backend = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid AND l.objsubid = 1
  AND l.pid <> pg_backend_pid()
  AND (s.ended_at IS NOT NULL OR s.seen_at <= now() - make_interval(secs => $2))
  -- Backend pids are reused: never end a session a live scheduler claims.
  AND NOT EXISTS (SELECT 1 FROM orca.schedulers y
                  WHERE y.backend = l.pid AND y.ended_at IS NULL
                    AND y.seen_at > now() - make_interval(secs => $2))
