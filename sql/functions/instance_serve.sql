-- orca.instance_serve(text,bigint,integer), made by migration 4.
-- `ec2-serve`: what instance p_instance serves in run (p_run, p_start): its
-- role, the head's address, whether it may take new code, and the run's
-- pipeline (its stored spec) and arguments. No row: not a live row of this
-- login's.
CREATE OR REPLACE FUNCTION orca.instance_serve(p_instance text, p_run bigint, p_start integer)
RETURNS TABLE (role text, address text, fresh_code boolean, spec jsonb, args text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    UPDATE orca.instances i SET state = 'joined', joined_at = coalesce(i.joined_at, now())
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL AND i.state IN ('starting', 'pooled');
    RETURN QUERY
    SELECT i.role, coalesce(i.address, '-'), i.fresh_code, p.spec, r.args
    FROM orca.instances i
    JOIN orca.runs r ON r.id = i.run
    JOIN orca.pipelines p ON p.name = r.pipeline
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.instance_serve(text,bigint,integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_serve(text,bigint,integer) TO orca_instance;
