-- Marks machine $1 as being removed for why $3 (kept: a removal taken up
-- again keeps its first why), so it claims nothing more. With $2 (the
-- busy_at the scaler saw), only if that is still so: a machine that claimed
-- a run since is busy, not idle. True if marked (or marked already).
UPDATE orca.pool_machines SET ending = coalesce(ending, now()),
    why = CASE WHEN ending IS NULL THEN $3 ELSE coalesce(why, $3) END
WHERE id = $1 AND ended_at IS NULL
  AND ($2::timestamptz IS NULL OR ending IS NOT NULL OR busy_at = $2)
  AND ($2::timestamptz IS NULL OR ending IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.machine = $1 AND r.state = 'running'))
RETURNING id
