-- The scheduler's view of its pipelines, with the database's clock.
SELECT now() AS now, name, spec, placement, max_runs, schedule, next_fire, paused
FROM orca.pipelines
WHERE NOT retired
ORDER BY name
