-- Run $1's attempts, oldest first (only those from attempt $2 to attempt $3,
-- where given): each
-- as it ended (orca.attempts, migration 19), and the run's current attempt
-- from the run itself when it has no row there: the one running now (its
-- output as its supervisor last wrote it: orca.output_tail), or one that
-- ended before migration 19. `tries` is how many attempts its pipeline's
-- retries allow (1 + retries), or more when it had more (stops and lost
-- machines queue a run again without counting a failure). Times are the
-- database's, in UTC.
WITH a AS (
    SELECT a.attempt, a.started_at, a.ended_at, a.outcome, a.exit_code, a.exit_signal,
           a.why, a.output, false AS running
    FROM orca.attempts a
    WHERE a.run = $1 AND ($2::integer IS NULL OR a.attempt >= $2)
      AND ($3::integer IS NULL OR a.attempt <= $3)
    UNION ALL
    SELECT r.start, r.started_at, CASE WHEN r.state <> 'running' THEN r.ended_at END,
           CASE WHEN r.state = 'queued' THEN 'requeued' ELSE r.state END,
           r.exit_code, r.exit_signal, r.why,
           orca.output_tail(r.id, r.start, r.output), r.state = 'running'
    FROM orca.runs r
    WHERE r.id = $1 AND r.start > 0 AND ($2::integer IS NULL OR r.start >= $2)
      AND ($3::integer IS NULL OR r.start <= $3)
      AND NOT EXISTS (SELECT 1 FROM orca.attempts k WHERE k.run = r.id AND k.attempt = r.start)
)
SELECT a.attempt, a.outcome, a.exit_code, a.exit_signal, a.why, a.output, a.running,
       greatest(t.tries, (SELECT max(r.start) FROM orca.runs r WHERE r.id = $1)) AS tries,
       to_char(a.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS started_at,
       to_char(a.ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS ended_at
FROM a
CROSS JOIN (
    SELECT 1 + coalesce((p.spec ->> 'retries')::integer, 0) AS tries
    FROM orca.runs r JOIN orca.pipelines p ON p.name = r.pipeline WHERE r.id = $1
) t
ORDER BY a.attempt
