-- Prunes up to $2 events of no run (pipelines', pools', the lead's) older
-- than $1 seconds (by the database's clock), oldest first. (A run's events
-- go with their run: sql/prune_runs.sql.) One row: (what, how many).
WITH d AS (
    DELETE FROM orca.events e
    WHERE e.id IN (
        SELECT v.id FROM orca.events v
        WHERE v.run IS NULL AND v.at < now() - make_interval(secs => $1::float8)
        ORDER BY v.at
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT 'events' AS what, count(*) AS n FROM d
