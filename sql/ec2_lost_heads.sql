-- EC2 runs whose head is lost: never served within $1 seconds of being
-- started (it never booted), or its beats stale for $2 seconds (by the
-- database's clock): run, start, pipeline, and whether the head ever served.
SELECT r.id, r.start, r.pipeline, h.served FROM orca.runs r
JOIN orca.pipelines p ON p.name = r.pipeline AND p.placement = 'ec2'
CROSS JOIN LATERAL (
    SELECT EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = r.id AND i.start = r.start
                   AND i.role = 'head' AND i.joined_at IS NOT NULL) AS served
) h
WHERE r.state = 'running'
  AND r.heartbeat < now() - make_interval(secs => CASE WHEN h.served THEN $2::float8 ELSE $1::float8 END)
ORDER BY r.id
