-- orca.instance_head_beat(bigint[],integer[],integer[]), made by migration 4.
CREATE OR REPLACE FUNCTION orca.instance_head_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM orca.check_beat(p_ids, p_starts, p_pids);
    RETURN QUERY
    UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
    FROM unnest(p_ids, p_starts, p_pids) AS b(id, start, pid)
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running' COLLATE "C"
      AND orca.instance_heads(b.id, b.start)
    RETURNING r.id, r.cancel;
END
$$;
REVOKE ALL ON FUNCTION orca.instance_head_beat(bigint[],integer[],integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_head_beat(bigint[],integer[],integer[]) TO orca_instance;
