-- Prunes up to $2 scheduler rows (orca.schedulers) that ended, or were last
-- seen, more than $1 seconds ago (by the database's clock), oldest first:
-- never one that leads or that a running run names as its starter. One
-- row: (what, how many).
WITH d AS (
    DELETE FROM orca.schedulers s
    WHERE s.id IN (
        SELECT v.id FROM orca.schedulers v
        WHERE coalesce(v.ended_at, v.seen_at) < now() - make_interval(secs => $1::float8)
          AND NOT v.leads
          AND NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.state = 'running' AND r.instance = v.id)
        ORDER BY coalesce(v.ended_at, v.seen_at)
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT 'schedulers' AS what, count(*) AS n FROM d
