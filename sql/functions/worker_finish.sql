-- orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb), made by migration 3.
CREATE OR REPLACE FUNCTION orca.worker_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body,
                               (orca.worker_machine()).id);
END
$$;
ALTER FUNCTION orca.worker_finish(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
REVOKE ALL ON FUNCTION orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) TO orca_worker;

-- orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision), made by migration 20.
-- As migration 10's orca.worker_finish, with p_ago.
CREATE OR REPLACE FUNCTION orca.worker_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_ago float8
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body,
                               (orca.worker_machine()).id, p_ago);
END
$$;
REVOKE ALL ON FUNCTION orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision) TO orca_worker;
