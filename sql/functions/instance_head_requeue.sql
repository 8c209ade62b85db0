-- orca.instance_head_requeue(bigint,integer,text,bytea), made by migration 4.
-- The attempt this login heads, stopped with its head: queued again.
CREATE OR REPLACE FUNCTION orca.instance_head_requeue(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT orca.instance_heads(p_id, p_start) THEN
        RETURN false;
    END IF;
    RETURN orca.requeue_attempt(p_id, p_start, p_why, p_output);
END
$$;
REVOKE ALL ON FUNCTION orca.instance_head_requeue(bigint,integer,text,bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_head_requeue(bigint,integer,text,bytea) TO orca_instance;
