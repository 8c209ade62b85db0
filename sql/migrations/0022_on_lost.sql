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

-- orca.on_lost() made here: its body is in sql/functions/on_lost.sql.
-- A stand-in until that file replaces it as `orca migrate` ends: the
-- trigger below needs its function.
CREATE FUNCTION orca.on_lost() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

CREATE TRIGGER runs_on_lost BEFORE UPDATE OF state ON orca.runs FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state = 'queued' AND NEW.failures = OLD.failures)
    EXECUTE FUNCTION orca.on_lost();

-- orca.requeue_attempt(bigint,integer,text,bytea) changed here: its body is in sql/functions/requeue_attempt.sql.
