-- Ends machine $1's row (its credentials are revoked and the machine deleted
-- by now), with the why its removal began with, else $2; runs still running
-- on it are queued again (cancelled, if a cancel was asked for; failed, with
-- its own event, for on_lost = "fail": migration 22). Returns the
-- runs queued again.
-- COLLATE "C" and machine = (a value, not a join: one would read the
-- index whole): its runs read through runs_machine_running (migration 12).
WITH m AS (
    UPDATE orca.pool_machines SET ended_at = now(), why = coalesce(why, $2)
    WHERE id = $1 AND ended_at IS NULL
    RETURNING id, pool, name, why
), r AS (
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(),
        why = format('its machine %s was removed: %s', (SELECT name FROM m), (SELECT why FROM m))
    WHERE machine = (SELECT id FROM m) AND state = 'running' COLLATE "C"
    RETURNING id, pipeline, state, why
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, why FROM r
    WHERE state <> 'failed'
    UNION ALL
    SELECT NULL, NULL, 'machine removed', format('%s of pool %s: %s', name, pool, why) FROM m
)
SELECT id FROM r ORDER BY id
