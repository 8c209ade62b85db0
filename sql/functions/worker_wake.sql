-- orca.worker_wake(), made by migration 27.
-- The channel a worker LISTENs on: its machine's pool's
-- (orca.wake_channel), which a run of the pool queued wakes.
CREATE OR REPLACE FUNCTION orca.worker_wake() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    RETURN orca.wake_channel('pool', m.pool);
END
$$;
REVOKE ALL ON FUNCTION orca.worker_wake() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_wake() TO orca_worker;
