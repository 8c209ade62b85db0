-- orca.instance_poll(text,bigint,integer), made by migration 4.
-- `pool-next`, every second: beats `polled` on the idle row and looks for
-- the next. Returns 'next' with the new row's run, start, head address and
-- fresh-code flag (the new row is `joined` now), 'ended' when the instance
-- has no live row (the scheduler shut it down), else 'wait'.
CREATE OR REPLACE FUNCTION orca.instance_poll(p_instance text, p_run bigint, p_start integer,
    OUT outcome text, OUT run bigint, OUT start integer, OUT address text, OUT fresh_code boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    r orca.instances;
BEGIN
    SELECT * INTO r FROM orca.instances i
    WHERE i.instance = p_instance AND i.login = session_user AND i.ended_at IS NULL
      AND i.state = 'pooled'
    ORDER BY i.id DESC LIMIT 1
    FOR UPDATE;
    IF FOUND THEN
        UPDATE orca.instances SET state = 'joined', joined_at = now() WHERE id = r.id;
        outcome := 'next';
        run := r.run;
        start := r.start;
        address := coalesce(r.address, '-');
        fresh_code := r.fresh_code;
        RETURN;
    END IF;
    UPDATE orca.instances i SET polled = clock_timestamp()
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL;
    IF FOUND THEN
        outcome := 'wait';
    ELSIF EXISTS (SELECT 1 FROM orca.instances i WHERE i.instance = p_instance
                  AND i.login = session_user AND i.ended_at IS NULL) THEN
        outcome := 'wait';
    ELSE
        outcome := 'ended';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION orca.instance_poll(text,bigint,integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_poll(text,bigint,integer) TO orca_instance;
