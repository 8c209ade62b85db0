-- Every live machine, by the database's clock: whether its worker was ever
-- seen, seconds since it was last heard from (or made), seconds it has run
-- nothing, the runs running on it, its age, its architecture, the busy_at a
-- conditional removal compares, whether it is being removed, its market,
-- and the spot notice it heard (migration 31: 'interrupted', 'draining' or
-- NULL). COLLATE "C": their runs read through runs_machine_running
-- (migration 12), counted in one pass grouped by machine.
SELECT m.id, m.pool, m.name, m.type, m.location, m.arch, m.role, m.provider_id, m.slots,
       m.seen_at IS NOT NULL AS seen,
       extract(epoch FROM now() - coalesce(m.seen_at, m.made_at))::float8 AS silent,
       extract(epoch FROM now() - m.busy_at)::float8 AS idle,
       coalesce(r.n, 0) AS running,
       extract(epoch FROM now() - m.made_at)::float8 AS age,
       m.busy_at, m.ending IS NOT NULL AS ending, m.region, m.market, m.notice
FROM orca.pool_machines m
LEFT JOIN (
    SELECT x.machine, count(*) AS n
    FROM orca.runs x
    WHERE x.state = 'running' COLLATE "C" AND x.machine IS NOT NULL
    GROUP BY x.machine
) r ON r.machine = m.id
WHERE m.ended_at IS NULL
ORDER BY m.pool, m.id
