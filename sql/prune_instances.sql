-- Prunes up to $2 EC2 instance rows (orca.instances) that ended more than
-- $1 seconds ago (by the database's clock), oldest first, whatever their
-- run (a run's instance rows also go with it: sql/prune_runs.sql). One
-- row: (what, how many).
WITH d AS (
    DELETE FROM orca.instances i
    WHERE i.id IN (
        SELECT v.id FROM orca.instances v
        WHERE v.ended_at IS NOT NULL AND v.ended_at < now() - make_interval(secs => $1::float8)
        ORDER BY v.ended_at
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT 'instances' AS what, count(*) AS n FROM d
