-- EC2 runs (attempts started as EC2 runs, host 'ec2 instances': not a
-- local attempt of a pipeline moved to ec2 since, which began on its
-- scheduler's host) running at their start with fewer instance rows than their head
-- and workers (one tick makes only so many instances; the rest are made on
-- the next ticks): run, start, pipeline, rows so far, and the head's own
-- address ('' if it has no row yet, or none known), and the pipeline's
-- spec (its own: the pipeline may have been retired since). Read from each EC2
-- pipeline's running runs (runs_running), not all runs running: OFFSET 0
-- keeps the planner from making it a join, which it may plan as a scan of
-- the whole index when its statistics say it is empty.
SELECT r.id, r.start, r.pipeline, n.made, coalesce(h.host, '') AS head_host, p.spec
FROM orca.pipelines p
CROSS JOIN LATERAL (
    SELECT x.id, x.start, x.pipeline FROM orca.runs x
    WHERE x.pipeline = p.name AND x.state = 'running' AND x.host = 'ec2 instances' OFFSET 0
) r
CROSS JOIN LATERAL (
    SELECT count(*) AS made FROM orca.instances i WHERE i.run = r.id AND i.start = r.start
) n
LEFT JOIN LATERAL (
    SELECT i.host FROM orca.instances i
    WHERE i.run = r.id AND i.start = r.start AND i.role = 'head'
    ORDER BY i.id LIMIT 1
) h ON true
WHERE p.placement = 'ec2'
  AND n.made < 1 + coalesce((p.spec -> 'ec2' ->> 'workers')::int, 0)
ORDER BY r.id
