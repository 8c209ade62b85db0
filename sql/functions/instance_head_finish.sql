-- orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb), made by migration 4.
-- How the attempt this login heads ended (see orca.finish_attempt).
CREATE OR REPLACE FUNCTION orca.instance_head_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'cancelled') OR NOT orca.instance_heads(p_id, p_start) THEN
        RETURN NULL;
    END IF;
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body);
END
$$;
ALTER FUNCTION orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
REVOKE ALL ON FUNCTION orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) TO orca_instance;

-- orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision), made by migration 20.
-- As migration 4's orca.instance_head_finish, with p_ago.
CREATE OR REPLACE FUNCTION orca.instance_head_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_ago float8
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'cancelled') OR NOT orca.instance_heads(p_id, p_start) THEN
        RETURN NULL;
    END IF;
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body,
                               NULL, p_ago);
END
$$;
REVOKE ALL ON FUNCTION orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision) TO orca_instance;
