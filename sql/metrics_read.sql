-- What the leader's metrics read from the database, every few seconds while
-- ORCA_METRICS_ADDR is set (one statement; the live-run partial indexes and
-- pool_machines_live): one row a (kind, name, state) with its value.
--   runs:     each registered pipeline's queued and running runs (0 too);
--   oldest:   seconds the oldest queued run of a pipeline neither paused nor
--             retired has been due (not_before: a retry's wait is not
--             counted), by the database's clock; 0 when none is due;
--   machines: each registered pool's live machines by state: ending (being
--             removed), booting (its worker not seen yet), up (0 too).
SELECT 'runs' AS kind, p.name, s.state, s.n::float8 AS value
FROM orca.pipelines p
CROSS JOIN LATERAL (
    SELECT 'queued'::text AS state, count(*) AS n FROM orca.runs r
    WHERE r.pipeline = p.name AND r.state = 'queued'
    UNION ALL
    SELECT 'running'::text, count(*) FROM orca.runs r
    WHERE r.pipeline = p.name AND r.state = 'running'
) s
WHERE NOT p.retired
UNION ALL
SELECT 'oldest', '', '',
       coalesce(extract(epoch FROM now() - min(r.not_before)), 0)::float8
FROM orca.pipelines p
JOIN orca.runs r ON r.pipeline = p.name AND r.state = 'queued' AND r.not_before <= now()
WHERE NOT p.paused AND NOT p.retired
UNION ALL
SELECT 'machines', o.name, st.state, count(m.id)::float8
FROM orca.pools o
CROSS JOIN (VALUES ('booting'), ('up'), ('ending')) st (state)
LEFT JOIN orca.pool_machines m
    ON m.pool = o.name AND m.ended_at IS NULL
   AND st.state = CASE WHEN m.ending IS NOT NULL THEN 'ending'
                       WHEN m.seen_at IS NULL THEN 'booting' ELSE 'up' END
WHERE NOT o.retired
GROUP BY o.name, st.state
