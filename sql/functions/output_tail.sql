-- orca.output_tail(bigint,integer,bytea), made by migration 8.
-- What attempt (p_id, p_start)'s output is now: p_output (its
-- runs.output) followed by its chunks, the last 64 KiB of that.
CREATE OR REPLACE FUNCTION orca.output_tail(p_id bigint, p_start integer, p_output bytea) RETURNS bytea
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT orca.bounded_output(coalesce(p_output, ''::bytea) || coalesce(
        (SELECT string_agg(c.bytes, ''::bytea ORDER BY c.at) FROM orca.output_chunks c
         WHERE c.run = p_id AND c.start = p_start), ''::bytea))
$$;
REVOKE ALL ON FUNCTION orca.output_tail(bigint,integer,bytea) FROM PUBLIC;
