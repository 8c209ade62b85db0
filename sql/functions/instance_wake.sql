-- orca.instance_wake(text), made by migration 27.
-- The channel `pool-next` LISTENs on: instance $1's own
-- (orca.wake_channel), which its hand-over to a run wakes; NULL unless the
-- instance has a live row of this login's.
CREATE OR REPLACE FUNCTION orca.instance_wake(p_instance text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM orca.instances i WHERE i.instance = p_instance
               AND i.login = session_user AND i.ended_at IS NULL) THEN
        RETURN orca.wake_channel('instance', p_instance);
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.instance_wake(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_wake(text) TO orca_instance;
