-- orca.runs_wake_pool_requeue(), made by migration 27: trigger
-- runs_wake_pool_requeue's. A run of a pool going back to queued (a retry
-- after its delay, an attempt queued again): a NOTIFY on its pool's
-- channel, its payload the milliseconds until it falls due (0: now).
-- Postgres folds the same notify made twice in a transaction into one.
CREATE OR REPLACE FUNCTION orca.runs_wake_pool_requeue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    place text;
BEGIN
    SELECT p.placement INTO place FROM orca.pipelines p WHERE p.name = NEW.pipeline;
    IF place LIKE 'worker:%' THEN
        PERFORM pg_notify(orca.wake_channel('pool', substr(place, 8)),
            greatest(0, ceil(extract(epoch FROM NEW.not_before - now()) * 1000))::bigint::text);
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.runs_wake_pool_requeue() FROM PUBLIC;
