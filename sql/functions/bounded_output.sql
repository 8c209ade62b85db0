-- orca.bounded_output(bytea), made by migration 5.
CREATE OR REPLACE FUNCTION orca.bounded_output(p_output bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN pg_catalog.octet_length(p_output) OPERATOR(pg_catalog.>) 65536
                THEN pg_catalog.substring(p_output,
                    pg_catalog.octet_length(p_output) OPERATOR(pg_catalog.-) 65535)
                ELSE p_output END
$$;
REVOKE ALL ON FUNCTION orca.bounded_output(bytea) FROM PUBLIC;
