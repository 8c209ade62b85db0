-- Queues a run of a pipeline that is registered and not retired; NULL if none.
-- Returns its id and whether its pipeline is paused (the run waits).
WITH r AS (
    INSERT INTO orca.runs (pipeline, fill, args, origin)
    SELECT name, $2, $3, $4 FROM orca.pipelines WHERE name = $1 AND NOT retired
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'queued', $5 FROM r
)
SELECT r.id, p.paused FROM r JOIN orca.pipelines p ON p.name = r.pipeline
