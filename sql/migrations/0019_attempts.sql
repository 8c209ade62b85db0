-- Migration 19: every attempt's output kept (issue 27 §2).
--
-- A run's output was one tail (runs.output): a retry's next attempt
-- cleared it, and the error that caused the retry was gone. Now each
-- attempt, as it stops running, leaves a row here: its number, when it
-- started and ended (the database's clock, as runs.started_at and
-- ended_at), how it came out, its exit code or signal, why, and its own
-- last 64 KiB of output. runs.output keeps its meaning (the current or
-- last attempt's tail).
--
-- The row is written by a trigger in the very statement that ends the
-- attempt, whichever it is: a supervisor's end (orca.finish_attempts,
-- orca.finish_attempt, a worker's orca.worker_round, an EC2 head's end),
-- a stopped attempt queued again, the sweep of stale runs, a lost or
-- removed machine, a lost head, a cancel. So none of them changed, and a
-- machine login still reaches only the SECURITY DEFINER functions, which
-- end only its own attempts: it can't write another run's rows, nor any
-- row but through an end of its own attempt. The trigger fires AFTER
-- runs_output_fold (a BEFORE trigger) has folded the attempt's streamed
-- chunks into runs.output, so the row has the whole tail.
--
-- Bounded per run, whatever a login does: a run keeps its last 100
-- attempts (the one 100 before is deleted as an attempt ends), so a login
-- looping claim and requeue can't grow this table past 100 x 64 KiB a run.
--
-- Keyed by run id: pruning finished runs deletes their rows with them.
-- (A run ended before this migration has no row; `orca logs` shows its
-- last attempt from runs, as before.)

CREATE TABLE orca.attempts (
    run          bigint NOT NULL,
    attempt      integer NOT NULL,            -- runs.start of the attempt
    started_at   timestamptz,
    ended_at     timestamptz NOT NULL,
    outcome      text NOT NULL
                 CHECK (outcome IN ('succeeded', 'failed', 'cancelled', 'requeued')),
    exit_code    integer,
    exit_signal  integer,
    why          text,
    output       bytea NOT NULL DEFAULT ''::bytea,  -- the attempt's last 64 KiB
    PRIMARY KEY (run, attempt)
);
REVOKE ALL ON TABLE orca.attempts FROM PUBLIC;

-- The attempt that stopped running, kept (and the one 100 before it
-- deleted). (As orca.output_fold: no settings of its own, every operator and
-- function named with its schema, so a caller's search_path can't stand
-- in for them; its callers are orca's role and orca's own SECURITY
-- DEFINER functions.)
-- orca.attempt_keep() made here: its body is in sql/functions/attempt_keep.sql.
-- A stand-in until that file replaces it as `orca migrate` ends: the
-- trigger below needs its function.
CREATE FUNCTION orca.attempt_keep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

CREATE TRIGGER runs_attempt_keep AFTER UPDATE OF state ON orca.runs FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state <> 'running')
    EXECUTE FUNCTION orca.attempt_keep();
