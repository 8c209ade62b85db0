-- Migration 24: on_lost judges an attempt by how it began (issue 28 §6).
--
-- Migration 22's trigger let a lost attempt of an `on_lost = "fail"`
-- pipeline be queued again when the pipeline is placed on ec2 and no head
-- of the attempt served: "its command never began". But the placement is
-- the pipeline's now, not the attempt's: a local attempt of a pipeline
-- moved to ec2 while it ran (orca.toml registered again) has no head and
-- began all the same, on its scheduler's host. An attempt is an EC2 one
-- when it was started as one (runs_start's host 'ec2 instances', every
-- binary since EC2 runs) or has instance rows; a local attempt lost is
-- failed as lost, as any other.

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
