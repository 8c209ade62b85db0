-- orca.worker_beat(bigint[],integer[],integer[]), made by migration 3.
CREATE OR REPLACE FUNCTION orca.worker_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    PERFORM orca.check_beat(p_ids, p_starts, p_pids);
    UPDATE orca.pool_machines SET seen_at = clock_timestamp(),
        busy_at = CASE WHEN cardinality(p_ids) > 0 THEN now() ELSE busy_at END
    WHERE pool_machines.id = m.id;
    PERFORM orca.requeue_attempt(x.id, x.start,
        format('the worker on machine %s was not running it', m.name), x.output)
    FROM orca.runs x
    WHERE x.machine = m.id AND x.state = 'running' COLLATE "C" AND NOT (x.id = ANY(p_ids))
      AND x.heartbeat < now() - interval '15 seconds';
    RETURN QUERY
    UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
    FROM unnest(p_ids, p_starts, p_pids) AS b(id, start, pid)
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running' COLLATE "C" AND r.machine = m.id
    RETURNING r.id, r.cancel;
END
$$;
REVOKE ALL ON FUNCTION orca.worker_beat(bigint[],integer[],integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_beat(bigint[],integer[],integer[]) TO orca_worker;
