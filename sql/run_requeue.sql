-- Puts attempt ($1, $2) back in the queue: its process was stopped, not
-- failed (cancelled instead, if a cancel was asked for).
WITH r AS (
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(), why = $3, output = $4
    WHERE id = $1 AND start = $2 AND state = 'running'
    RETURNING id, pipeline, state
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, $3 FROM r
)
SELECT id FROM r
