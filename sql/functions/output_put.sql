-- orca.output_put(bigint,integer,bigint,bytea), made by migration 8.
-- As migration 8's, marking the attempt chunked with its first chunk.
CREATE OR REPLACE FUNCTION orca.output_put(p_id bigint, p_start integer, p_at bigint, p_bytes bytea)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_upto bigint;
    v_stored bigint;
BEGIN
    IF p_at IS NULL OR p_at < 0 OR coalesce(octet_length(p_bytes), 0) = 0 THEN
        RETURN;
    END IF;
    v_upto := p_at + octet_length(p_bytes);
    IF octet_length(p_bytes) > 65536 THEN
        p_bytes := orca.bounded_output(p_bytes);
        p_at := v_upto - 65536;
    END IF;
    SELECT max(c.upto) INTO v_stored FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start;
    IF v_stored >= v_upto THEN
        RETURN;
    ELSIF v_stored > p_at THEN
        p_bytes := substring(p_bytes FROM (v_stored - p_at + 1)::integer);
        p_at := v_stored;
    END IF;
    INSERT INTO orca.output_chunks (run, start, at, upto, bytes)
    VALUES (p_id, p_start, p_at, v_upto, p_bytes);
    DELETE FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start AND c.upto <= v_upto - 65536;
    -- Its first chunk (a chunk stays until the fold: the one just stored
    -- ends past the cut): its end folds them (the trigger's WHEN).
    IF v_stored IS NULL THEN
        UPDATE orca.runs r SET chunked = true
        WHERE r.id = p_id AND r.start = p_start AND NOT r.chunked;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION orca.output_put(bigint,integer,bigint,bytea) FROM PUBLIC;
