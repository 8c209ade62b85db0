-- orca.runs_beat(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]), made by migration 8.
CREATE OR REPLACE FUNCTION orca.runs_beat(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    beaten bigint[];
    cancels boolean[];
BEGIN
    WITH b AS (
        UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = x.pid
        FROM unnest(p_ids, p_starts, p_pids) AS x(id, start, pid)
        WHERE r.id = x.id AND r.start = x.start AND r.state = 'running' COLLATE "C"
        RETURNING r.id, r.cancel
    )
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
    INTO beaten, cancels FROM b;
    PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
    RETURN QUERY SELECT b.id, b.cancel FROM unnest(beaten, cancels) AS b(id, cancel);
END
$$;
REVOKE ALL ON FUNCTION orca.runs_beat(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]) FROM PUBLIC;
