-- `orca status`'s last errors: the newest $1 failed runs among the newest
-- 10,000 runs (a range of the primary key: the same cost however much
-- history there is), with how they ended, times UTC.
SELECT id, pipeline, exit_code, exit_signal, why,
       to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS ended_at
FROM orca.runs
WHERE id > (SELECT coalesce(max(id), 0) FROM orca.runs) - 10000
  AND state = 'failed'
ORDER BY id DESC
LIMIT $1
