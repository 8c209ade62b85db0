-- Migration 18: history that stays bounded (issue 27 §1).
--
-- 1. The leader prunes what ended more than ORCA_KEEP_DAYS ago
--    (src/scheduler/prune.rs, sql/prune_*.sql), a bounded batch a
--    statement, oldest first. The indexes below let each batch find its
--    rows without reading the history it keeps:
--    * runs that ended, by when: keyed on ended_at, for runs in an ended
--      state. The predicate compares state COLLATE "C", as lookups other
--      than a pipeline's picks and counts do (ARCHITECTURE.md: a partial
--      index serves only the lookups made for it), so no other lookup's
--      `state = '…'` implies it;
--    * events of no run, by when (those of a run go with their run);
--    * alerts by run (the prune keeps a run whose alert is not sent yet,
--      and deletes a pruned run's alerts with it);
--    * ended pool machines and ended instances, by when.
--    orca.schedulers is a row per scheduler started: small, read whole.
--
-- 2. A run can't be queued again without end. Whoever queues a running
--    attempt again (a machine login's orca.worker_requeue, a worker's
--    round finding a run it no longer runs, orca.worker_hello, an
--    instance's requeue, a sweep, a machine's end), the requeue that would
--    be its REQUEUE_BOUND-th (500) fails the run instead, once, with the why
--    `failed: requeued 500 times (bound), the last by HOST: WHY`, a `failed`
--    event and its alert: a failed run is claimed by no one, so nothing
--    more is written for it. (A retry, which counts a failure, is bounded
--    by the pipeline's retries, at most 1000.) So a run's attempt number
--    is at most retries + 1 + 500, and the events a machine login can make
--    for it (a `started` and a `requeued` per requeue, `started`,
--    `failed` and `retried` per retry) are bounded with it.
--
--    It is a trigger, so it holds for every function that requeues
--    (those of older binaries included) without restating them: fired
--    only by an UPDATE that sets state, and only when the attempt number
--    is at REQUEUE_BOUND or past it (a single column's comparison: the
--    rounds' UPDATEs below it set up nothing more). The function checks
--    the rest. (The constant 500 is in the trigger's WHEN and the
--    function; docs/operations.md names it.)

CREATE INDEX runs_history ON orca.runs (ended_at)
    WHERE state COLLATE "C" IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX events_unrun_at ON orca.events (at) WHERE run IS NULL;
CREATE INDEX alerts_run ON orca.alerts (run);
CREATE INDEX pool_machines_ended ON orca.pool_machines (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX instances_ended ON orca.instances (ended_at) WHERE ended_at IS NOT NULL;

-- orca.requeue_bound() made here: its body is in sql/functions/requeue_bound.sql.
-- A stand-in until that file replaces it as `orca migrate` ends: the
-- trigger below needs its function.
CREATE FUNCTION orca.requeue_bound() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

CREATE TRIGGER runs_requeue_bound BEFORE UPDATE OF state ON orca.runs FOR EACH ROW
    WHEN (NEW.start >= 500) EXECUTE FUNCTION orca.requeue_bound();
