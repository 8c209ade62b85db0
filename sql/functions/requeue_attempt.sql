-- orca.requeue_attempt(bigint,integer,text,bytea), made by migration 3.
CREATE OR REPLACE FUNCTION orca.requeue_attempt(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    p_why := orca.bounded_why(p_why);
    p_output := orca.bounded_output(p_output);
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(), why = p_why, output = p_output
    WHERE id = p_id AND start = p_start AND state = 'running' COLLATE "C"
    RETURNING id, pipeline, state INTO r;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF r.state IN ('cancelled', 'queued') THEN
        INSERT INTO orca.events (run, pipeline, kind, why)
        VALUES (r.id, r.pipeline, CASE WHEN r.state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, p_why);
    END IF;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION orca.requeue_attempt(bigint,integer,text,bytea) FROM PUBLIC;
