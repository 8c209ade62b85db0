-- orca.worker_requeue(bigint,integer,text,bytea), made by migration 3.
CREATE OR REPLACE FUNCTION orca.worker_requeue(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    PERFORM 1 FROM orca.runs
    WHERE id = p_id AND start = p_start AND machine = m.id AND state = 'running' COLLATE "C" FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN orca.requeue_attempt(p_id, p_start, p_why, p_output);
END
$$;
REVOKE ALL ON FUNCTION orca.worker_requeue(bigint,integer,text,bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_requeue(bigint,integer,text,bytea) TO orca_worker;
