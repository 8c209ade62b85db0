-- Marks machine $1 as being removed for why $3 (kept: a removal taken up
-- again keeps its first why), so it claims nothing more. With $2 (the
-- busy_at the scaler saw), only if that is still so: a machine that claimed
-- a run since is busy, not idle. With $4 (a backend pid), only while that
-- session holds the lead lock $5: a write made on another session than the
-- leading one is fenced on it. True if marked (or marked already).
UPDATE orca.pool_machines SET ending = coalesce(ending, now()),
    why = CASE WHEN ending IS NULL THEN $3 ELSE coalesce(why, $3) END
WHERE id = $1 AND ended_at IS NULL
  AND ($2::timestamptz IS NULL OR ending IS NOT NULL OR busy_at = $2)
  AND ($2::timestamptz IS NULL OR ending IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.machine = $1 AND r.state = 'running'))
  AND ($4::integer IS NULL OR EXISTS (
      SELECT 1 FROM pg_locks l
      WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $4
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid = ($5::bigint >> 32)::oid AND l.objid = ($5::bigint & 4294967295)::oid
        AND l.objsubid = 1))
RETURNING id
