-- orca.instance_heads(bigint,integer), made by migration 4.
-- Whether this login is the live head of attempt (p_id, p_start).
CREATE OR REPLACE FUNCTION orca.instance_heads(p_id bigint, p_start integer) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM orca.instances i
                   WHERE i.run = p_id AND i.start = p_start AND i.role = 'head'
                     AND i.login = session_user AND i.ended_at IS NULL)
$$;
REVOKE ALL ON FUNCTION orca.instance_heads(bigint,integer) FROM PUBLIC;
