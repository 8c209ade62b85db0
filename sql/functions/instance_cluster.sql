-- orca.instance_cluster(text,bigint,integer), made by migration 6.
CREATE OR REPLACE FUNCTION orca.instance_cluster(p_instance text, p_run bigint, p_start integer)
RETURNS TABLE (head text, workers text[], over boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    me orca.instances;
BEGIN
    SELECT * INTO me FROM orca.instances i
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL
    ORDER BY i.id DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT coalesce(nullif(CASE WHEN me.role = 'head' THEN me.host ELSE me.address END, ''), '-'),
           coalesce((SELECT array_agg(coalesce(nullif(w.host, ''), '-') ORDER BY w.id)
                     FROM orca.instances w
                     WHERE w.run = p_run AND w.start = p_start AND w.role = 'worker'
                       AND w.ended_at IS NULL), '{}'::text[]),
           NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.id = p_run AND r.start = p_start
                       AND r.state = 'running' COLLATE "C");
END
$$;
REVOKE ALL ON FUNCTION orca.instance_cluster(text,bigint,integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_cluster(text,bigint,integer) TO orca_instance;
