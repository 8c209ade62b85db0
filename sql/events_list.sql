-- `orca events`: the newest $6 events that match, oldest first. Each filter
-- applies when given: $1 run, $2 pipeline, $3 kind, since $4 seconds ago
-- (the database's clock) or since time $5, and up to id $7 (`-f`: the
-- newest when it began, those after it followed).
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at, run, pipeline, kind, why
FROM (
    SELECT * FROM orca.events
    WHERE ($1::bigint IS NULL OR run = $1)
      AND ($2::text IS NULL OR pipeline = $2)
      AND ($3::text IS NULL OR kind = $3)
      AND ($4::float8 IS NULL OR at >= now() - make_interval(secs => $4))
      AND ($5::timestamptz IS NULL OR at >= $5)
      AND ($7::bigint IS NULL OR id <= $7)
    ORDER BY id DESC
    LIMIT $6
) newest
ORDER BY id
