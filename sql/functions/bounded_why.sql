-- orca.bounded_why(text), made by migration 5.
CREATE OR REPLACE FUNCTION orca.bounded_why(p_why text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN pg_catalog.length(p_why) OPERATOR(pg_catalog.>) 4096
                THEN pg_catalog.left(p_why, 4080) OPERATOR(pg_catalog.||) ' … (cut)'::pg_catalog.text
                ELSE p_why END
$$;
REVOKE ALL ON FUNCTION orca.bounded_why(text) FROM PUBLIC;
