-- `orca cancel --pipeline $1 --queued`: every queued run of pipeline $1
-- cancelled, with a `cancelled` event each ($2: why), in this one
-- statement. A run a worker or the scheduler claims meanwhile is left to
-- its claim (the UPDATE reads its state again once the claim commits).
-- Returns whether the pipeline exists and how many runs were cancelled.
WITH q AS (
    UPDATE orca.runs SET state = 'cancelled', ended_at = now(), why = 'cancelled before it started'
    WHERE pipeline = $1 AND state = 'queued'
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'cancelled', $2 FROM q
)
SELECT EXISTS (SELECT 1 FROM orca.pipelines WHERE name = $1) AS known,
       (SELECT count(*) FROM q) AS cancelled
