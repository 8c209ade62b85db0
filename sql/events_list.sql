SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at, run, pipeline, kind, why
FROM (
    SELECT * FROM orca.events
    WHERE ($1::bigint IS NULL OR run = $1)
    ORDER BY id DESC
    LIMIT $2
) newest
ORDER BY id
