-- Prunes up to $2 pool machine rows that ended more than $1 seconds ago
-- (by the database's clock), oldest first: their logins are long dropped
-- and their runs long queued again. One row: (what, how many).
WITH d AS (
    DELETE FROM orca.pool_machines m
    WHERE m.id IN (
        SELECT v.id FROM orca.pool_machines v
        WHERE v.ended_at IS NOT NULL AND v.ended_at < now() - make_interval(secs => $1::float8)
        ORDER BY v.ended_at
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT 'pool machines' AS what, count(*) AS n FROM d
