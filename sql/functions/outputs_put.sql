-- orca.outputs_put(bigint[],bigint[],integer[],bigint[],bytea[]), made by migration 8.
CREATE OR REPLACE FUNCTION orca.outputs_put(p_beaten bigint[], p_ids bigint[], p_starts integer[],
    p_at bigint[], p_bytes bytea[])
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) > 1024 OR coalesce(cardinality(p_starts), 0) > 1024
       OR coalesce(cardinality(p_at), 0) > 1024 OR coalesce(cardinality(p_bytes), 0) > 1024 THEN
        RAISE EXCEPTION 'a beat appends to at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    PERFORM orca.output_put(o.id, o.start, o.at, o.bytes)
    FROM unnest(p_ids, p_starts, p_at, p_bytes) AS o(id, start, at, bytes)
    JOIN orca.runs r ON r.id = o.id AND r.start = o.start AND r.state = 'running' COLLATE "C"
    WHERE o.id = ANY(p_beaten);
END
$$;
REVOKE ALL ON FUNCTION orca.outputs_put(bigint[],bigint[],integer[],bigint[],bytea[]) FROM PUBLIC;
