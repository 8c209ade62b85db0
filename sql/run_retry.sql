-- `orca retry`: queues a new run of ended run $1's pipeline with its
-- arguments and fill flag, unless $1 is still queued or running, was
-- retried already (it has a `rerun` event), or its pipeline is retired.
-- The new run's `queued` event names the run it retries, and run $1 gets
-- a `rerun` event naming the new one ($2: who). Run after
-- sql/run_retry_lock.sql in one transaction. Returns the new id (NULL when
-- refused), the old run's state, whether it was retried already, its
-- pipeline and whether that is retired or paused; no row: no such run.
WITH old AS (
    SELECT r.id, r.pipeline, r.fill, r.args, r.state, p.retired, p.paused,
           EXISTS (SELECT 1 FROM orca.events e
                   WHERE e.run = r.id AND e.kind = 'rerun') AS rerun
    FROM orca.runs r JOIN orca.pipelines p ON p.name = r.pipeline
    WHERE r.id = $1
), new AS (
    INSERT INTO orca.runs (pipeline, fill, args, origin)
    SELECT pipeline, fill, args, 'manual' FROM old
    WHERE state NOT IN ('queued', 'running') AND NOT rerun AND NOT retired
    RETURNING id, pipeline
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'queued', format('retry of run %s (orca retry by %s)', $1, $2::text) FROM new
    UNION ALL
    SELECT $1, pipeline, 'rerun', format('retried as run %s (orca retry by %s)', id, $2::text) FROM new
)
SELECT (SELECT id FROM new) AS id, old.state, old.rerun, old.pipeline, old.retired, old.paused
FROM old
