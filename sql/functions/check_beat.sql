-- orca.check_beat(bigint[],integer[],integer[]), made by migration 5.
-- A beat names at most this many attempts (a machine runs `slots` at once;
-- an instance heads one): more is refused, not unnested.
CREATE OR REPLACE FUNCTION orca.check_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) > 1024 OR coalesce(cardinality(p_starts), 0) > 1024
       OR coalesce(cardinality(p_pids), 0) > 1024 THEN
        RAISE EXCEPTION 'a beat names at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION orca.check_beat(bigint[],integer[],integer[]) FROM PUBLIC;
