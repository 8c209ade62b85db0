-- orca.requeue_bound(), made by migration 18.
CREATE OR REPLACE FUNCTION orca.requeue_bound() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_url text;
BEGIN
    IF OLD.state = 'running' AND NEW.state = 'queued'
       AND NEW.failures = OLD.failures AND NEW.start - NEW.failures >= 500 THEN
        NEW.state := 'failed';
        NEW.not_before := OLD.not_before;
        NEW.ended_at := now();
        NEW.why := format('failed: requeued %s times (bound), the last by %s: %s',
            NEW.start - NEW.failures, left(coalesce(OLD.host, '?'), 200),
            left(coalesce(NEW.why, ''), 1024));
        INSERT INTO orca.events (run, pipeline, kind, why)
        VALUES (NEW.id, NEW.pipeline, 'failed', NEW.why);
        SELECT p.spec ->> 'alert' INTO v_url FROM orca.pipelines p WHERE p.name = NEW.pipeline;
        IF v_url IS NOT NULL THEN
            INSERT INTO orca.alerts (run, pipeline, url, body)
            VALUES (NEW.id, NEW.pipeline, v_url,
                jsonb_build_object('pipeline', NEW.pipeline, 'run', NEW.id, 'start', NEW.start,
                    'state', 'failed', 'exit_code', NULL, 'exit_signal', NULL, 'why', NEW.why,
                    'output', ''));
        END IF;
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION orca.requeue_bound() FROM PUBLIC;
