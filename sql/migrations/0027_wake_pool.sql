-- Migration 27: a run of a pool wakes the pool's idle workers, and a warm
-- hand-over wakes the instance's `pool-next`, by Postgres NOTIFY (issue 30).
--
-- Machine and instance logins may LISTEN and NOTIFY on any channel, so a
-- channel must not be guessable by any other: each is the SHA-256 of a
-- random secret of this database (orca.wake_secret, which no login may
-- read) and the pool's or the instance's name. A pool's machines learn their
-- pool's channel from orca.worker_wake(), an instance its own from
-- orca.instance_wake(); nothing else tells it.
--
-- The functions are sql/functions/{wake_channel,worker_wake,instance_wake,
-- runs_wake_pool,runs_wake_pool_requeue,instances_wake_next}.sql; the
-- triggers' functions are made here empty (a trigger needs its function
-- first) and given their bodies by their files, applied after this
-- migration in the same transaction.
CREATE TABLE orca.wake_secret (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    secret  text NOT NULL
);
REVOKE ALL ON TABLE orca.wake_secret FROM PUBLIC;
INSERT INTO orca.wake_secret (secret)
VALUES (gen_random_uuid()::text || gen_random_uuid()::text);

CREATE FUNCTION orca.runs_wake_pool() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE FUNCTION orca.runs_wake_pool_requeue() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE FUNCTION orca.instances_wake_next() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;

-- Runs queued by an INSERT (`orca run`, `--each`'s 100,000 rows, a fire):
-- one notify per pool that got runs, per statement.
CREATE TRIGGER runs_wake_pool AFTER INSERT ON orca.runs
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION orca.runs_wake_pool();
-- A run going back to queued (a retry, a requeue): rare, so per row, and
-- only those rows (the WHEN is checked without calling the function; a
-- beat or a claim never calls it).
CREATE TRIGGER runs_wake_pool_requeue AFTER UPDATE OF state ON orca.runs
    FOR EACH ROW WHEN (NEW.state = 'queued' AND OLD.state IS DISTINCT FROM 'queued')
    EXECUTE FUNCTION orca.runs_wake_pool_requeue();
-- A warm hand-over (sql/instance_hand_over.sql) adds the instance's
-- `pooled` row: its `pool-next` is woken.
CREATE TRIGGER instances_wake_next AFTER INSERT ON orca.instances
    FOR EACH ROW WHEN (NEW.state = 'pooled')
    EXECUTE FUNCTION orca.instances_wake_next();
