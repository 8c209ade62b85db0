-- Queued runs to start now, oldest first: per pipeline at most max_runs less
-- its running ones; fill runs on top, at most max_fills (the spec's, 10 for
-- a spec stored before it: config::spec::DEFAULT_MAX_FILLS) less its
-- running fill runs. $1: placement; $2: how many at most.
-- Each pick reads its own kind's runs in runs_queued_order (migration 12),
-- oldest first, and no more of a pipeline than it may take.
SELECT id, pipeline, args FROM (
    SELECT q.id, q.pipeline, q.args
    FROM orca.pipelines p
    CROSS JOIN LATERAL (
        SELECT count(*)::int AS n FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'running' AND NOT r.fill
    ) c
    CROSS JOIN LATERAL (
        SELECT r.id, r.pipeline, r.args FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'queued' AND NOT r.fill AND r.not_before <= now()
        ORDER BY r.queued_at, r.id
        LIMIT greatest(p.max_runs - c.n, 0)
    ) q
    WHERE p.placement = $1 AND NOT p.paused AND NOT p.retired
    UNION ALL
    SELECT f.id, f.pipeline, f.args
    FROM orca.pipelines p
    CROSS JOIN LATERAL (
        SELECT count(*)::int AS n FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'running' AND r.fill
    ) c
    CROSS JOIN LATERAL (
        SELECT r.id, r.pipeline, r.args FROM orca.runs r
        WHERE r.pipeline = p.name AND r.state = 'queued' AND r.fill AND r.not_before <= now()
        ORDER BY r.queued_at, r.id
        LIMIT least(greatest(coalesce((p.spec ->> 'max_fills')::int, 10) - c.n, 0), $2::bigint)
    ) f
    WHERE p.placement = $1 AND NOT p.paused AND NOT p.retired
) s
ORDER BY id
LIMIT $2
