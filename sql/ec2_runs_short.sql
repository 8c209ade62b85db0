-- EC2 runs running at their start with fewer instance rows than their head
-- and workers (one tick makes only so many instances; the rest are made on
-- the next ticks): run, start, pipeline, rows so far, and the head's own
-- address ('' if it has no row yet, or none known).
SELECT r.id, r.start, r.pipeline, n.made, coalesce(h.host, '') AS head_host
FROM orca.runs r
JOIN orca.pipelines p ON p.name = r.pipeline AND p.placement = 'ec2'
CROSS JOIN LATERAL (
    SELECT count(*) AS made FROM orca.instances i WHERE i.run = r.id AND i.start = r.start
) n
LEFT JOIN LATERAL (
    SELECT i.host FROM orca.instances i
    WHERE i.run = r.id AND i.start = r.start AND i.role = 'head'
    ORDER BY i.id LIMIT 1
) h ON true
WHERE r.state = 'running'
  AND n.made < 1 + coalesce((p.spec -> 'ec2' ->> 'workers')::int, 0)
ORDER BY r.id
