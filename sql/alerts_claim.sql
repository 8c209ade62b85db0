-- Takes due alerts for one attempt to send, leasing them for a minute so a
-- crash mid-send only delays them.
UPDATE orca.alerts SET next_try = now() + interval '60 seconds'
WHERE id IN (
    SELECT id FROM orca.alerts WHERE NOT done AND next_try <= now()
    ORDER BY id LIMIT 16 FOR UPDATE SKIP LOCKED
)
RETURNING id, run, pipeline, url, body, attempts
