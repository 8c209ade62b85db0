-- Every live machine, by the database's clock: whether its worker was ever
-- seen, seconds since it was last heard from (or made), seconds it has run
-- nothing, the runs running on it, its age, its architecture, the busy_at a conditional
-- removal compares, whether it is being removed, and the spot notice it
-- heard (migration 32: 'interrupted', 'draining' or NULL).
-- COLLATE "C": their runs read through runs_machine_running (migration 12).
SELECT m.id, m.pool, m.name, m.type, m.location, m.arch, m.role, m.provider_id, m.slots,
       m.seen_at IS NOT NULL AS seen,
       extract(epoch FROM now() - coalesce(m.seen_at, m.made_at))::float8 AS silent,
       extract(epoch FROM now() - m.busy_at)::float8 AS idle,
       (SELECT count(*) FROM orca.runs r WHERE r.machine = m.id AND r.state = 'running' COLLATE "C") AS running,
       extract(epoch FROM now() - m.made_at)::float8 AS age,
       m.busy_at, m.ending IS NOT NULL AS ending, m.region, m.notice
FROM orca.pool_machines m
WHERE m.ended_at IS NULL
ORDER BY m.pool, m.id
