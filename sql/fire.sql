-- Fires slot $2 of pipeline $1 and moves it on to $3: one run per slot, never
-- twice (the unique slot index), and only if no one has moved it on already.
WITH p AS (
    UPDATE orca.pipelines SET next_fire = $3
    WHERE name = $1 AND next_fire = $2 AND NOT paused AND NOT retired
    RETURNING name
), r AS (
    INSERT INTO orca.runs (pipeline, origin, scheduled_for)
    SELECT name, 'schedule', $2 FROM p
    ON CONFLICT (pipeline, scheduled_for) WHERE scheduled_for IS NOT NULL DO NOTHING
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'fired', $4 FROM r
)
SELECT id FROM r
