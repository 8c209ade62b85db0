WITH a AS (
    UPDATE orca.alerts SET done = true, attempts = attempts + 1 WHERE id = $1
    RETURNING run, pipeline, attempts
)
INSERT INTO orca.events (run, pipeline, kind, why)
SELECT run, pipeline, 'alert sent', format('to %s (attempt %s)', $2::text, attempts) FROM a
