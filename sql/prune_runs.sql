-- Prunes up to $2 runs that ended more than $1 seconds ago (by the
-- database's clock), oldest first, with what is theirs: events, output
-- chunks, attempts (orca.attempts), alerts (sent or given up) and ended
-- instance rows. A run is kept
-- while anything still needs it: queued or running (not ended), an alert
-- not yet sent, an instance row still live; one locked right now is left to
-- the next batch. One row per table: (what, how many deleted).
-- A table of rows keyed by run id is one more line in `gone` and one in
-- the SELECT below (src/scheduler/prune.rs: STEPS).
WITH r AS (
    DELETE FROM orca.runs x
    WHERE x.id IN (
        SELECT c.id FROM orca.runs c
        WHERE c.state COLLATE "C" IN ('succeeded', 'failed', 'cancelled')
          AND c.ended_at < now() - make_interval(secs => $1::float8)
          AND NOT EXISTS (SELECT 1 FROM orca.alerts a WHERE a.run = c.id AND NOT a.done)
          AND NOT EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = c.id AND i.ended_at IS NULL)
        ORDER BY c.ended_at
        LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED)
      AND x.state COLLATE "C" IN ('succeeded', 'failed', 'cancelled')
    RETURNING x.id
), events AS (
    DELETE FROM orca.events e WHERE e.run IN (SELECT r.id FROM r) RETURNING 1
), chunks AS (
    DELETE FROM orca.output_chunks o WHERE o.run IN (SELECT r.id FROM r) RETURNING 1
), alerts AS (
    DELETE FROM orca.alerts a WHERE a.run IN (SELECT r.id FROM r) RETURNING 1
), instances AS (
    DELETE FROM orca.instances i WHERE i.run IN (SELECT r.id FROM r) RETURNING 1
), attempts AS (
    DELETE FROM orca.attempts a WHERE a.run IN (SELECT r.id FROM r) RETURNING 1
)
SELECT 'runs' AS what, count(*) AS n FROM r
UNION ALL SELECT 'events', count(*) FROM events
UNION ALL SELECT 'output chunks', count(*) FROM chunks
UNION ALL SELECT 'alerts', count(*) FROM alerts
UNION ALL SELECT 'instances', count(*) FROM instances
UNION ALL SELECT 'attempts', count(*) FROM attempts
