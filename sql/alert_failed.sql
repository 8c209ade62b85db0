-- An attempt to send alert $1 failed ($2: why). Tries again after a backoff
-- doubling from 1 s up to 5 min, and gives up after $3 attempts.
WITH a AS (
    UPDATE orca.alerts SET
        attempts = attempts + 1,
        done = attempts + 1 >= $3,
        next_try = now() + make_interval(secs => least(power(2, attempts), 300))
    WHERE id = $1
    RETURNING run, pipeline, attempts, done, next_try
)
INSERT INTO orca.events (run, pipeline, kind, why)
SELECT run, pipeline, 'alert failed',
       CASE WHEN done THEN format('%s; gave up after %s attempts', $2::text, attempts)
            ELSE format('%s; attempt %s, next in %ss', $2::text, attempts,
                        round(extract(epoch FROM next_try - now()))) END
FROM a
