-- orca.runs_wake_pool(), made by migration 27: trigger runs_wake_pool's.
-- After an INSERT into orca.runs (one statement: `orca run`, the 100,000
-- rows of `orca run --each`, a fire): one NOTIFY per pool that got queued
-- runs, on the pool's channel (orca.wake_channel), its payload the
-- milliseconds until the earliest of them falls due (0: due now).
CREATE OR REPLACE FUNCTION orca.runs_wake_pool() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT substr(p.placement, 8) AS pool,
            greatest(0, ceil(extract(epoch FROM min(a.due) - now()) * 1000))::bigint AS due_ms
        FROM (SELECT n.pipeline, min(n.not_before) AS due FROM added n
              WHERE n.state = 'queued' GROUP BY n.pipeline) a
        JOIN orca.pipelines p ON p.name = a.pipeline
        WHERE p.placement LIKE 'worker:%'
        GROUP BY p.placement
    LOOP
        PERFORM pg_notify(orca.wake_channel('pool', r.pool), r.due_ms::text);
    END LOOP;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.runs_wake_pool() FROM PUBLIC;
