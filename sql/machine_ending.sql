-- Marks machine $1 as being removed for why $3 (kept: a removal taken up
-- again keeps its first why), so it claims nothing more. With $2 (the
-- busy_at the scaler saw), only if that is still so: a machine that claimed
-- a run since is busy, not idle. With $4 (a backend pid), only while that
-- session holds the lead lock $5: a write made on another session than the
-- leading one is fenced on it. A row locked now (a claim under way, or a
-- login holding it) is not waited for: not marked this time. One row:
-- whether it is marked (or was already), and whether its row was held
-- (the machine live, its row locked by another session: worth asking
-- again soon).
-- COLLATE "C": its runs read through runs_machine_running (migration 12).
WITH m AS (
    SELECT id FROM orca.pool_machines WHERE id = $1 AND ended_at IS NULL
    FOR NO KEY UPDATE SKIP LOCKED
), u AS (
    UPDATE orca.pool_machines p SET ending = coalesce(p.ending, now()),
        why = CASE WHEN p.ending IS NULL THEN $3 ELSE coalesce(p.why, $3) END
    FROM m
    WHERE p.id = m.id
      AND ($2::timestamptz IS NULL OR p.ending IS NOT NULL OR p.busy_at = $2)
      AND ($2::timestamptz IS NULL OR p.ending IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.machine = $1 AND r.state = 'running' COLLATE "C"))
      AND ($4::integer IS NULL OR EXISTS (
          SELECT 1 FROM pg_locks l
          WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $4
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND l.classid = ($5::bigint >> 32)::oid AND l.objid = ($5::bigint & 4294967295)::oid
            AND l.objsubid = 1))
    RETURNING p.id
)
SELECT EXISTS (SELECT 1 FROM u) AS marked,
       NOT EXISTS (SELECT 1 FROM m)
       AND EXISTS (SELECT 1 FROM orca.pool_machines WHERE id = $1 AND ended_at IS NULL) AS held
