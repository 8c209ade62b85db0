-- Ends machine $1's row with why $2 (its credentials are revoked and the
-- machine deleted by now); runs still running on it are queued again
-- (cancelled, if a cancel was asked for). Returns the runs queued again.
WITH m AS (
    UPDATE orca.pool_machines SET ended_at = now(), why = $2
    WHERE id = $1 AND ended_at IS NULL
    RETURNING id, pool, name
), r AS (
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(),
        why = format('its machine %s was removed: %s', (SELECT name FROM m), $2::text)
    WHERE machine IN (SELECT id FROM m) AND state = 'running'
    RETURNING id, pipeline, state, why
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, why FROM r
    UNION ALL
    SELECT NULL, NULL, 'machine removed', format('%s of pool %s: %s', name, pool, $2::text) FROM m
)
SELECT id FROM r ORDER BY id
