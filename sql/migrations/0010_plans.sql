-- Migration 10: claims and ends planned once a session (issue 14's claims
-- a second), the same behaviour.
--
-- PL/pgSQL plans a statement again on every call for as long as it judges
-- a plan made for the call's values cheaper than one made for any values.
-- orca.worker_claim's picks (their LIMIT and fill flag variables, their
-- UPDATE joined to the pick) were planned again on every claim, and so was
-- the output fold's tail on every end: more than half of what a claim and
-- an end cost. Here each statement of a claim and an end has a plan that
-- is good whatever its values (an UPDATE of the ids its picks found, the
-- fill runs' pick a branch of its own with the flag a constant, the tail
-- read only when there are chunks), and the functions say so
-- (plan_cache_mode = force_generic_plan), so each is planned once a
-- session.
--
-- * orca.worker_claim: the runs it claims of a pipeline (within max_runs,
--   then fill runs), their events and the rows it returns are one
--   statement (no second read of what it claimed).
-- * orca.finish_attempt gains p_machine: with it, the attempt ends only if
--   it runs on that machine. orca.worker_finish passes its machine instead
--   of reading the attempt first; the end and its events are one
--   statement.
-- * orca.finish_attempts ends several attempts in one statement, not a
--   function call each (sql/runs_finish.sql, a tick's ends: issue 14's
--   starts a second).
-- * orca.output_fold reads and deletes chunks only when the attempt has
--   some, and its trigger is one that an UPDATE which sets neither state
--   nor start (a beat) doesn't look at: every UPDATE of orca.runs read and
--   checked its condition anew.
-- * orca.bounded_why and orca.bounded_output are PL/pgSQL: a call is an
--   expression evaluated, not a query planned (a SQL function with a SET
--   clause is never inlined).
-- * Every UPDATE of orca.runs reads its CHECK constraint anew: the same
--   check over one array constant reads in two thirds of the time of the
--   list of five it replaces. Added NOT VALID: every row already passed
--   the check it replaces, so none is read (the table is not scanned).
-- * runs_queued (pipeline, id) goes: runs_queued_order (pipeline,
--   queued_at, id) serves every lookup it did, and each index is one more
--   to open and check on every UPDATE of orca.runs.

ALTER TABLE orca.runs DROP CONSTRAINT runs_state_check,
    ADD CONSTRAINT runs_state_check
    CHECK (state = ANY ('{queued,running,succeeded,failed,cancelled}'::text[])) NOT VALID;

DROP INDEX orca.runs_queued;

-- orca.bounded_why(text) changed here: its body is in sql/functions/bounded_why.sql.

-- orca.bounded_output(bytea) changed here: its body is in sql/functions/bounded_output.sql.

-- orca.output_fold() changed here: its body is in sql/functions/output_fold.sql.
-- Only an UPDATE that sets state or start can stop an attempt running: the
-- fold's trigger is for those alone (a beat sets neither), its condition
-- the running row, the rest in the function.
DROP TRIGGER runs_output_fold ON orca.runs;
CREATE TRIGGER runs_output_fold BEFORE UPDATE OF state, start ON orca.runs FOR EACH ROW
WHEN (OLD.state = 'running') EXECUTE FUNCTION orca.output_fold();

-- How attempts ended, as migration 0005's orca.finish_attempt had it for
-- one (and orca.finish_attempt below has it): each run queued again after
-- its retry delay while retries are left (unless a cancel was asked for),
-- its events, the alert of a final failure; and with p_machine only the
-- attempts that run on that machine.
-- Arrays of one length, an attempt at each place (at most 1024); an
-- attempt named twice ends once, at its first place. For each place in
-- order, the run and the state it is in now (NULL: the attempt was no
-- longer running, there). One statement for them all.
-- orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint) made here: its body is in sql/functions/finish_attempts.sql.

-- How attempt (p_id, p_start) ended, as orca.finish_attempts has it for
-- several (the two must agree: tests/it/worker.rs checks they do), in two
-- statements (three with an alert) instead of its one for all, which costs more for one: a
-- worker's ends come one at a time. With p_machine only if it runs on that
-- machine. The run's state now, or NULL if the attempt was no longer
-- running (there).
-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint) made here: its body is in sql/functions/finish_attempt.sql.

-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb) changed here: its body is in sql/functions/finish_attempt.sql.

-- orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) changed here: its body is in sql/functions/worker_finish.sql.

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

