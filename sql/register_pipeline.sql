-- Upserts one pipeline from orca.toml. A changed schedule is fired afresh from
-- its next slot (next_fire NULL: the scheduler computes it). $6: on_lost
-- (retry or fail; migration 22's trigger reads it).
INSERT INTO orca.pipelines AS p (name, spec, placement, max_runs, schedule, next_fire, retired, on_lost)
VALUES ($1, $2, $3, $4, $5, NULL, false, $6)
ON CONFLICT (name) DO UPDATE SET
    spec = excluded.spec,
    placement = excluded.placement,
    max_runs = excluded.max_runs,
    schedule = excluded.schedule,
    on_lost = excluded.on_lost,
    next_fire = CASE WHEN p.schedule IS NOT DISTINCT FROM excluded.schedule AND NOT p.retired
                     THEN p.next_fire ELSE NULL END,
    retired = false,
    registered = now()
RETURNING (xmax = 0) AS inserted
