-- Running local runs whose heartbeat is older than the stale limit ($1 s) and
-- that this process does not supervise ($2): no live process does, so they
-- are queued again.
WITH r AS (
    UPDATE orca.runs SET state = 'queued', heartbeat = NULL, ended_at = now(),
        why = format('heartbeat stale for over %ss', $1::float8)
    WHERE state = 'running'
      AND heartbeat < now() - make_interval(secs => $1)
      AND NOT (id = ANY($2))
      AND pipeline IN (SELECT name FROM orca.pipelines WHERE placement = 'local')
    RETURNING id, pipeline, why
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'requeued', why FROM r
)
SELECT id FROM r ORDER BY id
