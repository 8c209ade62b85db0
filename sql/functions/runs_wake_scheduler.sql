-- orca.runs_wake_scheduler(), made by migration 26: the runs' triggers
-- runs_wake_scheduler_queued (a statement's inserted runs, its transition
-- table `queued`) and runs_wake_scheduler_requeued (a row queued again)
-- notify the channel of orca.wake when a local run may start now. SECURITY
-- DEFINER: the channel's name is read as orca's owner, whoever queued.
CREATE OR REPLACE FUNCTION orca.runs_wake_scheduler() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_channel text;
BEGIN
    IF TG_LEVEL = 'STATEMENT' THEN
        IF NOT EXISTS (SELECT 1 FROM queued q JOIN orca.pipelines p ON p.name = q.pipeline
                       WHERE q.state = 'queued' AND q.not_before <= now() AND p.placement = 'local') THEN
            RETURN NULL;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM orca.pipelines p WHERE p.name = NEW.pipeline AND p.placement = 'local') THEN
        RETURN NULL;
    END IF;
    SELECT w.channel INTO v_channel FROM orca.wake w;
    IF v_channel IS NOT NULL THEN
        PERFORM pg_notify(v_channel, '');
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.runs_wake_scheduler() FROM PUBLIC;
