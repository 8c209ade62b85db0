-- Migration 26: a queued run wakes the leading scheduler (issues 30, 33).
--
-- The scheduler LISTENs on a channel whose name is a secret made here, at
-- migrate time ('orca_queued_' and 32 random hex digits), kept in a table
-- only orca's owner reads: machine and instance logins may LISTEN and
-- NOTIFY on any channel they can name, so they must not learn this one
-- (nor flood it). Runs' triggers notify it through a SECURITY DEFINER
-- function, so whoever queues a run needs no right on the table. A lost
-- or forged notification costs at most one start pass: the tick stays the
-- floor (src/scheduler/wake.rs).
CREATE TABLE orca.wake (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    channel  text NOT NULL CHECK (channel ~ '^orca_queued_[0-9a-f]{32}$')
);
REVOKE ALL ON TABLE orca.wake FROM PUBLIC;
INSERT INTO orca.wake (channel)
VALUES ('orca_queued_' || replace(gen_random_uuid()::text, '-', ''));

-- orca.runs_wake_scheduler() made here: its body is in sql/functions/runs_wake_scheduler.sql.
CREATE FUNCTION orca.runs_wake_scheduler() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

-- One notification a statement, however many runs it queues (`orca run
-- --each` queues 100,000 in one): the inserted rows are looked at through
-- the statement's transition table, only for a local run startable now.
CREATE TRIGGER runs_wake_scheduler_queued AFTER INSERT ON orca.runs
    REFERENCING NEW TABLE AS queued
    FOR EACH STATEMENT EXECUTE FUNCTION orca.runs_wake_scheduler();

-- A run queued again (a retry due now, an attempt stopped or lost): per
-- row, but only for those rows; Postgres sends one notification a
-- transaction for the same channel and payload.
CREATE TRIGGER runs_wake_scheduler_requeued AFTER UPDATE OF state ON orca.runs
    FOR EACH ROW
    WHEN (NEW.state = 'queued' AND OLD.state IS DISTINCT FROM 'queued' AND NEW.not_before <= now())
    EXECUTE FUNCTION orca.runs_wake_scheduler();
