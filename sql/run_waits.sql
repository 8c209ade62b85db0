-- Why queued run $1 waits, as far as the database can tell: its pipeline,
-- whether that is paused, and whether a live scheduler leads: the lead lock
-- $2 is held and, where instance rows say who leads (overlap on), one of
-- those was seen within the stale limit $3 (s) by the database's clock.
SELECT r.pipeline, p.paused,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.classid = ($2::bigint >> 32)::oid
                 AND l.objid = ($2::bigint & 4294967295)::oid AND l.objsubid = 1)
       AND (NOT EXISTS (SELECT 1 FROM orca.schedulers WHERE ended_at IS NULL AND leads)
            OR EXISTS (SELECT 1 FROM orca.schedulers
                       WHERE ended_at IS NULL AND leads
                         AND seen_at > now() - make_interval(secs => $3))) AS led
FROM orca.runs r JOIN orca.pipelines p ON p.name = r.pipeline
WHERE r.id = $1
