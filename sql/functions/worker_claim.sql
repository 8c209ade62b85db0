-- orca.worker_claim(integer), made by migration 3.
CREATE OR REPLACE FUNCTION orca.worker_claim(p_room integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
    n integer;
BEGIN
    RETURN QUERY SELECT c.id, c.start, c.pipeline, c.args, c.spec
    FROM orca.claim_runs(m, p_room, NULL::integer) c;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp()
        WHERE pool_machines.id = m.id;
    END IF;
END
$$;
ALTER FUNCTION orca.worker_claim(integer) SET plan_cache_mode = force_generic_plan;
REVOKE ALL ON FUNCTION orca.worker_claim(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_claim(integer) TO orca_worker;
