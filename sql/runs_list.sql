SELECT id, pipeline, state, start, fill, args, origin,
       to_char(queued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS queued_at,
       to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS started_at,
       to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS ended_at,
       exit_code, exit_signal, why, host, pid
FROM orca.runs
WHERE ($1::text IS NULL OR pipeline = $1)
  AND ($2::text IS NULL OR state = $2)
  -- Due (queued, and past any retry delay) at least $4 seconds ago.
  AND ($4::float8 IS NULL OR greatest(queued_at, not_before) <= now() - make_interval(secs => $4))
ORDER BY id DESC
LIMIT $3
