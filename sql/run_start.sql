-- Claims queued run $1 for this process: a new start (attempt) number.
WITH r AS (
    UPDATE orca.runs SET state = 'running', start = start + 1, started_at = now(), ended_at = NULL,
        heartbeat = now(), host = $2, pid = NULL, instance = $3, machine = NULL, cancel = false,
        exit_code = NULL, exit_signal = NULL, why = NULL, output = ''::bytea
    WHERE id = $1 AND state = 'queued'
    RETURNING id, pipeline, start
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, 'started', format('attempt %s on %s', start, $2::text) FROM r
)
SELECT start FROM r
