-- A sensor said yes: queue a run unless one it queued is still waiting.
-- COLLATE "C": read through runs_sensor_queued (migration 12).
WITH r AS (
    INSERT INTO orca.runs (pipeline, origin)
    SELECT name, 'sensor' FROM orca.pipelines
    WHERE name = $1 AND NOT retired AND NOT paused
      AND NOT EXISTS (SELECT 1 FROM orca.runs
                      WHERE pipeline = $1 AND state = 'queued' COLLATE "C" AND origin = 'sensor')
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'queued', $2 FROM r
)
SELECT id FROM r
