-- orca.instance_head_output(bigint,integer,bytea), made by migration 4.
CREATE OR REPLACE FUNCTION orca.instance_head_output(p_id bigint, p_start integer, p_output bytea)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE orca.runs SET output = substring(p_output FROM greatest(octet_length(p_output) - 65535, 1))
    WHERE id = p_id AND start = p_start AND state = 'running' COLLATE "C" AND orca.instance_heads(p_id, p_start);
END
$$;
REVOKE ALL ON FUNCTION orca.instance_head_output(bigint,integer,bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_head_output(bigint,integer,bytea) TO orca_instance;
