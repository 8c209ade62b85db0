-- Claims queued runs $1 (ids) for this process, each a new start (attempt)
-- number, in one statement: $2 the host, $3 the scheduler's row id (the
-- column runs.instance, a stored name). Returns the id and start of each
-- claimed, oldest first (a run no longer queued is not claimed). COLLATE
-- "C": the runs looked up by their key, not through a partial index on
-- state (migration 0011).
WITH r AS (
    UPDATE orca.runs SET state = 'running', start = start + 1, started_at = now(), ended_at = NULL,
        heartbeat = now(), host = $2, pid = NULL, instance = $3, machine = NULL, cancel = false,
        exit_code = NULL, exit_signal = NULL, why = NULL, output = ''::bytea
    WHERE id = ANY($1::bigint[]) AND state = 'queued' COLLATE "C"
    RETURNING id, pipeline, start
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'started', format('attempt %s on %s', start, $2::text) FROM r
)
SELECT id, start FROM r ORDER BY id
