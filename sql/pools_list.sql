-- `orca pools`: every pool that is declared or still has machines.
SELECT name, retired, demand, status,
       extract(epoch FROM now() - status_at)::float8 AS since
FROM orca.pools
WHERE NOT retired
   OR EXISTS (SELECT 1 FROM orca.pool_machines m WHERE m.pool = name AND m.ended_at IS NULL)
ORDER BY name
