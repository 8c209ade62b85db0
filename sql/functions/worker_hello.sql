-- orca.worker_hello(), made by migration 3.
CREATE OR REPLACE FUNCTION orca.worker_hello(OUT pool text, OUT name text, OUT slots integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
    r record;
BEGIN
    UPDATE orca.pool_machines SET seen_at = clock_timestamp() WHERE id = m.id;
    -- A worker starting runs nothing yet: runs still running on this machine
    -- were its previous worker's, whose processes died with it.
    FOR r IN SELECT x.id, x.start FROM orca.runs x WHERE x.machine = m.id AND x.state = 'running' COLLATE "C" LOOP
        PERFORM orca.requeue_attempt(r.id, r.start,
            format('the worker on machine %s started again', m.name), ''::bytea);
    END LOOP;
    pool := m.pool;
    name := m.name;
    slots := m.slots;
END
$$;
REVOKE ALL ON FUNCTION orca.worker_hello() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_hello() TO orca_worker;
