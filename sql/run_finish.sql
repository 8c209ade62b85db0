-- Records how attempt ($1, $2) ended. $3: succeeded, failed or cancelled;
-- $4/$5: exit code or signal; $6: why; $7: output tail; $8: retries allowed;
-- $9: retry delay (s); $10: alert URL; $11: alert body. A failure with
-- retries left is queued again after the delay (unless a cancel was asked
-- for); a final failure with an
-- alert URL puts the alert in the outbox. Returns the state the run is in.
WITH r AS (
    UPDATE orca.runs SET
        state = CASE WHEN $3 = 'failed' AND failures < $8 AND NOT cancel THEN 'queued' ELSE $3 END,
        failures = failures + CASE WHEN $3 = 'failed' THEN 1 ELSE 0 END,
        not_before = CASE WHEN $3 = 'failed' AND failures < $8 AND NOT cancel
                          THEN now() + make_interval(secs => $9) ELSE not_before END,
        ended_at = now(), heartbeat = NULL,
        exit_code = $4, exit_signal = $5, why = $6, output = $7
    WHERE id = $1 AND start = $2 AND state = 'running'
    RETURNING id, pipeline, state, failures
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, $3, $6 FROM r
    UNION ALL
    SELECT id, pipeline, 'retried', format('retry %s of %s in %ss', failures, $8, $9) FROM r
    WHERE state = 'queued'
), a AS (
    INSERT INTO orca.alerts (run, pipeline, url, body)
    SELECT id, pipeline, $10, $11 FROM r WHERE state = 'failed' AND $10::text IS NOT NULL
)
SELECT state FROM r
