-- Pauses ($2 true) or resumes a pipeline. A resumed schedule fires from its
-- next slot, not for the slots it slept through.
WITH p AS (
    UPDATE orca.pipelines
    SET paused = $2, next_fire = CASE WHEN $2 THEN next_fire ELSE NULL END
    WHERE name = $1 AND NOT retired
    RETURNING name
), e AS (
    INSERT INTO orca.events (pipeline, kind, why)
    SELECT name, CASE WHEN $2 THEN 'paused' ELSE 'resumed' END, $3 FROM p
)
SELECT name FROM p
