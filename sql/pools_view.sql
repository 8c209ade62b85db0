-- Every pool the scaler looks after (declared, or retired with live
-- machines), with the database's clock: its spec, its type walk, its status
-- and demand as the last pass left them, and the
-- runs of its pipelines (not paused) queued at least $1 seconds that a worker
-- could start: per pipeline at most max_runs less its running ones, plus its
-- fill runs up to max_fills (10 for a spec stored before it) less its
-- running fill runs. (Room on the pool's workers is taken off by the caller.)
-- Cost: the pipelines are read once (grouped by the pool their placement
-- names, not scanned again for each pool), and each pipeline's queued runs
-- are counted only up to its cap (LIMIT): a pool with 100 runs waiting and
-- room for 50 reads 50 of them.
WITH w AS (
    SELECT substr(p.placement, 8) AS pool, sum(x.n) AS n
    FROM orca.pipelines p
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE NOT r.fill) AS n, count(*) FILTER (WHERE r.fill) AS f
        FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'running'
    ) c
    CROSS JOIN LATERAL (
        SELECT (SELECT count(*) FROM (
                    SELECT 1 FROM orca.runs r
                    WHERE r.pipeline = p.name AND r.state = 'queued' AND NOT r.fill
                      AND greatest(r.queued_at, r.not_before) <= now() - make_interval(secs => $1)
                    LIMIT greatest(p.max_runs - c.n, 0)) q)
             + (SELECT count(*) FROM (
                    SELECT 1 FROM orca.runs r
                    WHERE r.pipeline = p.name AND r.state = 'queued' AND r.fill
                      AND greatest(r.queued_at, r.not_before) <= now() - make_interval(secs => $1)
                    LIMIT greatest(coalesce((p.spec ->> 'max_fills')::int, 10) - c.f, 0)) q) AS n
    ) x
    WHERE starts_with(p.placement, 'worker:') AND NOT p.paused AND NOT p.retired
    GROUP BY 1
)
SELECT pl.name, pl.spec, pl.retired, pl.walk_type,
       extract(epoch FROM now() - pl.walk_since)::float8 AS walk_for,
       extract(epoch FROM now() - pl.tried_at)::float8 AS tried_ago,
       pl.status, coalesce(w.n, 0)::bigint AS waiting, pl.demand
FROM orca.pools pl
LEFT JOIN w ON w.pool = pl.name
WHERE NOT pl.retired
   OR EXISTS (SELECT 1 FROM orca.pool_machines m WHERE m.pool = pl.name AND m.ended_at IS NULL)
ORDER BY pl.name
