-- What an EC2 run's instances know of their cluster (issue 11): the head's
-- own address and its workers', so the driver of a distributed engine, as
-- well as the services, can reach the whole cluster. An instance login may
-- read them for a run it serves, and nothing else.

-- `ec2-serve`: the addresses of run (p_run, p_start)'s instances, for
-- instance p_instance of this login serving it: the head's address (the
-- head's own for the head; for a worker, the one the scheduler gave it,
-- as `pool-next` prints it; '-' if none is known), the live workers' own in
-- the order they were given to the run ('-' for one not known), and whether
-- the run is over at that start (no more will come). No row when this
-- login has no live row in the run.
CREATE FUNCTION orca.instance_cluster(p_instance text, p_run bigint, p_start integer)
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
                       AND r.state = 'running');
END
$$;

REVOKE ALL ON FUNCTION orca.instance_cluster(text, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_cluster(text, bigint, integer) TO orca_instance;
