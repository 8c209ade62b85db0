-- `orca pipelines`: each pipeline ($1: retired ones too; on_lost: retry or
-- fail, what a lost supervisor means for its runs), its running and
-- queued runs (counted through the partial indexes on state), and its last
-- ended run: found walking runs_pipeline_id (pipeline, id) back from the
-- newest, past the pipeline's queued and running runs only, so it costs the
-- same with a million finished runs as with none. Times UTC.
SELECT p.name, p.placement, p.schedule, p.paused, p.retired, p.max_runs, p.on_lost,
       to_char(p.next_fire AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS next_fire,
       (SELECT count(*) FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'running') AS running,
       (SELECT count(*) FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'queued') AS queued,
       l.id AS last_id, l.state AS last_state, l.exit_code AS last_exit_code,
       l.exit_signal AS last_exit_signal,
       to_char(l.ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS last_ended_at
FROM orca.pipelines p
LEFT JOIN LATERAL (
    SELECT r.id, r.state, r.exit_code, r.exit_signal, r.ended_at
    FROM orca.runs r
    WHERE r.pipeline = p.name AND r.state NOT IN ('queued', 'running')
    ORDER BY r.id DESC
    LIMIT 1
) l ON true
WHERE $1::boolean OR NOT p.retired
ORDER BY p.name
