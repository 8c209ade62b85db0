-- orca.instance_run_over(text,bigint,integer), made by migration 4.
CREATE OR REPLACE FUNCTION orca.instance_run_over(p_instance text, p_run bigint, p_start integer)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM orca.instances i
                   WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
                     AND i.login = session_user AND i.ended_at IS NULL) THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM orca.runs r
                       WHERE r.id = p_run AND r.start = p_start AND r.state = 'running' COLLATE "C");
END
$$;
REVOKE ALL ON FUNCTION orca.instance_run_over(text,bigint,integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_run_over(text,bigint,integer) TO orca_instance;
