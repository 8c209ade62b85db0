-- Schedulers, oldest first, with whether each is live by the database's
-- clock ($1: stale s): unless $2 (--all), only those not long gone (live,
-- or ended or unseen within the last hour).
SELECT id, host, pid, image, migrations,
       coalesce(array_length(running, 1), 0) AS runs,
       extract(epoch FROM now() - seen_at)::float8 AS seen_ago,
       ended_at IS NULL AND seen_at > now() - make_interval(secs => $1) AS live,
       leads, draining, ended_at IS NOT NULL AS ended,
       to_char(seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS last_seen
FROM orca.schedulers
WHERE $2::boolean
   OR coalesce(ended_at, seen_at) > now() - interval '1 hour'
   OR (ended_at IS NULL AND seen_at > now() - make_interval(secs => $1))
ORDER BY id
