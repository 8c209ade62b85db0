-- orca.worker_machine(), made by migration 3.
CREATE OR REPLACE FUNCTION orca.worker_machine() RETURNS orca.pool_machines
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines;
BEGIN
    SELECT * INTO m FROM orca.pool_machines WHERE role = session_user AND ended_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live machine logs in as this role' USING ERRCODE = 'OR001';
    END IF;
    RETURN m;
END
$$;
REVOKE ALL ON FUNCTION orca.worker_machine() FROM PUBLIC;
