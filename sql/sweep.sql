-- Running runs started by a scheduler (not on a pool machine, not an EC2
-- attempt of a pipeline placed on ec2, which EC2 runs' upkeep watches: a
-- pipeline moved from local to a pool or to ec2 since counts as local here,
-- as does an EC2 attempt of a pipeline moved off ec2) whose
-- heartbeat is older than the stale limit ($1 s)
-- and that no live process supervises: not this process's ($2), and not held
-- by a live scheduler that lists them (the runs-held condition).
-- They are queued again (cancelled, if a cancel was asked for; failed, by
-- migration 22's trigger, for a pipeline with on_lost = "fail", which
-- writes its own event).
WITH r AS (
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(),
        why = format('heartbeat stale for over %ss and no live scheduler holds it', $1::float8)
    WHERE state = 'running'
      AND heartbeat < now() - make_interval(secs => $1)
      AND NOT (id = ANY($2))
      AND machine IS NULL
      AND NOT (coalesce(host, '') = 'ec2 instances'
               AND pipeline IN (SELECT name FROM orca.pipelines WHERE placement = 'ec2'))
      AND NOT EXISTS (
          SELECT 1 FROM orca.schedulers s
          WHERE s.id = orca.runs.instance AND s.ended_at IS NULL
            AND s.seen_at > now() - make_interval(secs => $1)
            AND orca.runs.id = ANY(s.running))
    RETURNING id, pipeline, why, state
), e AS (
    INSERT INTO orca.events (run, pipeline, kind, why)
    SELECT id, pipeline, CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, why FROM r
    WHERE state <> 'failed'
)
SELECT id, state FROM r ORDER BY id
