-- orca.instance_idle(text,bigint,integer), made by migration 4.
-- `pool-next`, first: the row of run (p_run, p_start) that instance
-- p_instance served is `idle` now (its work has stopped). False if there is
-- no such live row of this login's.
CREATE OR REPLACE FUNCTION orca.instance_idle(p_instance text, p_run bigint, p_start integer)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE orca.instances SET state = 'idle', idle_at = coalesce(idle_at, now()),
        polled = clock_timestamp()
    WHERE instance = p_instance AND run = p_run AND start = p_start
      AND login = session_user AND ended_at IS NULL;
    RETURN FOUND;
END
$$;
REVOKE ALL ON FUNCTION orca.instance_idle(text,bigint,integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_idle(text,bigint,integer) TO orca_instance;
