-- Cancels run $1: a queued one at once; a running one is flagged for the
-- process that supervises it, once: a running run already flagged is left
-- as it is, with no second event. Returns 'now:cancelled' or 'now:asked' for
-- what it did, 'already:asked' for a cancel already under way, else the
-- run's state (NULL: no such run; queued or running:
-- it changed under this statement, try again). COLLATE "C": the run looked
-- up by its key, not through a partial index on state (migration 0011).
WITH q AS (
    UPDATE orca.runs SET state = 'cancelled', ended_at = now(), why = 'cancelled before it started'
    WHERE id = $1 AND state = 'queued' COLLATE "C"
    RETURNING id, pipeline
), r AS (
    UPDATE orca.runs SET cancel = true
    WHERE id = $1 AND state = 'running' COLLATE "C" AND NOT cancel
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'cancelled', $2 FROM q
    UNION ALL
    SELECT id, pipeline, 'cancel asked', $2 FROM r
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM q) THEN 'now:cancelled'
            WHEN EXISTS (SELECT 1 FROM r) THEN 'now:asked'
            WHEN EXISTS (SELECT 1 FROM orca.runs
                         WHERE id = $1 AND state = 'running' COLLATE "C" AND cancel)
                THEN 'already:asked'
            ELSE (SELECT state FROM orca.runs WHERE id = $1) END AS state
