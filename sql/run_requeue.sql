-- Puts attempt ($1, $2) back in the queue: its process was stopped, not failed.
WITH r AS (
    UPDATE orca.runs SET state = 'queued', heartbeat = NULL, ended_at = now(), why = $3, output = $4
    WHERE id = $1 AND start = $2 AND state = 'running'
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'requeued', $3 FROM r
)
SELECT id FROM r
