-- EC2 runs (attempts started as such, host 'ec2 instances': a local
-- attempt of a pipeline moved to ec2 since is the sweep's) whose head is lost: never served within $1 seconds of being
-- started (it never booted), or its beats stale for $2 seconds (by the
-- database's clock): run, start, pipeline, and whether the head ever served.
-- Read from each EC2 pipeline's running runs (runs_running), not all runs
-- running: OFFSET 0 keeps the planner from making it a join, which it may
-- plan as a scan of the whole index when its statistics say it is empty.
SELECT r.id, r.start, r.pipeline, h.served FROM orca.pipelines p
CROSS JOIN LATERAL (
    SELECT x.id, x.start, x.pipeline, x.heartbeat FROM orca.runs x
    WHERE x.pipeline = p.name AND x.state = 'running' AND x.host = 'ec2 instances' OFFSET 0
) r
CROSS JOIN LATERAL (
    SELECT EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = r.id AND i.start = r.start
                   AND i.role = 'head' AND i.joined_at IS NOT NULL) AS served
) h
WHERE p.placement = 'ec2'
  AND r.heartbeat < now() - make_interval(secs => CASE WHEN h.served THEN $2::float8 ELSE $1::float8 END)
ORDER BY r.id
