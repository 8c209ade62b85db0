-- orca.on_lost(), made by migration 22.
CREATE OR REPLACE FUNCTION orca.on_lost() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_url text;
BEGIN
    SELECT p.spec ->> 'alert' INTO v_url FROM orca.pipelines p
    WHERE p.name = NEW.pipeline AND p.on_lost = 'fail';
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    -- An EC2 attempt (started as one, host 'ec2 instances', or with
    -- instance rows) whose head never served: its command never began (no
    -- instance could be made for it, or the head never booted).
    IF (OLD.host = 'ec2 instances' OR EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = OLD.id AND i.start = OLD.start))
       AND NOT EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = OLD.id AND i.start = OLD.start
                       AND i.role = 'head' AND i.joined_at IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    NEW.state := 'failed';
    NEW.not_before := OLD.not_before;
    NEW.ended_at := coalesce(NEW.ended_at, now());
    NEW.why := format('lost (on_lost = "fail", not run again): %s',
        left(coalesce(NEW.why, 'its supervisor was lost'), 1024));
    INSERT INTO orca.events (run, pipeline, kind, why)
    VALUES (NEW.id, NEW.pipeline, 'failed', NEW.why);
    IF v_url IS NOT NULL THEN
        INSERT INTO orca.alerts (run, pipeline, url, body)
        VALUES (NEW.id, NEW.pipeline, v_url,
            jsonb_build_object('pipeline', NEW.pipeline, 'run', NEW.id, 'start', NEW.start,
                'state', 'failed', 'exit_code', NULL, 'exit_signal', NULL, 'why', NEW.why,
                'output', ''));
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION orca.on_lost() FROM PUBLIC;
