-- orca.instance_head_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]), made by migration 8.
-- The head beats the attempt it heads (as orca.instance_head_beat) and
-- appends its new output (p_out_*, as orca.outputs_put).
CREATE OR REPLACE FUNCTION orca.instance_head_round(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    beaten bigint[];
    cancels boolean[];
BEGIN
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
    INTO beaten, cancels FROM orca.instance_head_beat(p_ids, p_starts, p_pids) b;
    PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
    RETURN QUERY SELECT b.id, b.cancel FROM unnest(beaten, cancels) AS b(id, cancel);
END
$$;
REVOKE ALL ON FUNCTION orca.instance_head_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_head_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]) TO orca_instance;
