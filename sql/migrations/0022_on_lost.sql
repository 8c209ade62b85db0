-- Migration 22: what a run's lost supervisor means for it (issue 28 §6).
--
-- A pipeline's `on_lost` (orca.toml; "retry" by default): what becomes of
-- an attempt whose supervisor was lost or stopped while its command may
-- have run (a sweep of a stale scheduler's runs, a removed or lost
-- machine, a worker that started again or stopped, a lost EC2 head, a
-- scheduler stopped with SIGTERM that hands its runs back):
-- * "retry": queued again, as before;
-- * "fail": failed, once, with the why `lost (on_lost = "fail", not run
--   again): WHY`, a `failed` event and its alert, and no retry: it runs
--   again only when a person says so (`orca retry`). For pipelines that
--   must never run twice (payments, e-mails): a command that ended with
--   exit 0 just before its supervisor was lost is not run again.
--
-- Like migration 18's bound, it is a trigger, so it holds for every path
-- that queues a running attempt again (orca.requeue_attempt and those that
-- call it, sql/sweep.sql, sql/machine_end.sql, older binaries' functions)
-- without restating them: fired by an UPDATE that takes a running attempt
-- back to queued without counting a failure (a retry counts one). An EC2
-- run whose head never served (no instance for it could be made, it never
-- booted) never began its command: it is queued again whatever on_lost
-- says. A cancel asked for still cancels. This trigger's name sorts before
-- runs_requeue_bound's, so it fires first (a failed run is no requeue).
--
-- orca.requeue_attempt's event now names what happened (`requeued` for a
-- run queued again, nothing more for one this trigger failed: its
-- `failed` event is written by the trigger).

ALTER TABLE orca.pipelines ADD COLUMN on_lost text NOT NULL DEFAULT 'retry'
    CHECK (on_lost IN ('retry', 'fail'));

CREATE FUNCTION orca.on_lost() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_url text;
    v_ec2 boolean;
BEGIN
    SELECT p.spec ->> 'alert', p.placement = 'ec2' INTO v_url, v_ec2 FROM orca.pipelines p
    WHERE p.name = NEW.pipeline AND p.on_lost = 'fail';
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    -- An EC2 run (its pipeline's placement, or instance rows of this
    -- attempt) whose head never served: its command never began (no
    -- instance could be made for it, or the head never booted).
    IF (v_ec2 OR EXISTS (SELECT 1 FROM orca.instances i WHERE i.run = OLD.id AND i.start = OLD.start))
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

CREATE TRIGGER runs_on_lost BEFORE UPDATE OF state ON orca.runs FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state = 'queued' AND NEW.failures = OLD.failures)
    EXECUTE FUNCTION orca.on_lost();

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
