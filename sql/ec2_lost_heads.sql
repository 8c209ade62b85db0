-- EC2 runs whose head is lost: never served within $1 seconds of being
-- started (boot), or its beats stale for $2 seconds (by the database's
-- clock): (run, start).
SELECT r.id, r.start FROM orca.runs r
JOIN orca.pipelines p ON p.name = r.pipeline AND p.placement = 'ec2'
WHERE r.state = 'running'
  AND r.heartbeat < now() - make_interval(secs => CASE
        WHEN EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = r.id AND i.start = r.start
                     AND i.role = 'head' AND i.joined_at IS NOT NULL) THEN $2::float8 ELSE $1::float8 END)
ORDER BY r.id
