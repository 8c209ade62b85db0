-- Worker pools: the pools orca.toml declares, their machines, this stack's
-- identity, and what a machine's credentials may do.
--
-- A machine logs in as a role of its own (made when the machine is made,
-- dropped when it is removed), a member of `orca_worker`. `orca_worker` may
-- do nothing but execute the `orca.worker_*` functions below, which act as
-- `session_user`'s machine only: its own pool's runs, its own rows.

CREATE TABLE orca.stack (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    id    text NOT NULL,                      -- labels this stack's machines
    made  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orca.pools (
    name        text PRIMARY KEY,
    spec        jsonb NOT NULL,                -- the pool as orca.toml declares it
    retired     boolean NOT NULL DEFAULT false, -- no longer in orca.toml: its machines go once idle
    registered  timestamptz NOT NULL DEFAULT now(),
    demand      integer NOT NULL DEFAULT 0,    -- at the last scaler pass
    status      text NOT NULL DEFAULT '',      -- what the last attempt came to, and why
    status_at   timestamptz,
    walk_type   integer NOT NULL DEFAULT 0,    -- the type the walk is on (index in spec.types)
    walk_since  timestamptz,                   -- when it started on it
    tried_at    timestamptz                    -- the last attempt to make a machine
);

CREATE TABLE orca.pool_machines (
    id           bigserial PRIMARY KEY,
    pool         text NOT NULL,
    name         text NOT NULL,                -- orca-<pool>-<id>
    type         text NOT NULL,
    location     text NOT NULL,
    arch         text NOT NULL DEFAULT '',
    role         text NOT NULL UNIQUE,         -- its login role (its token's user)
    provider_id  text,                         -- the provider's id for it
    region       text,                         -- ec2: the region it was made in (removed there)
    slots        integer NOT NULL DEFAULT 1,
    made_at      timestamptz NOT NULL DEFAULT now(),
    seen_at      timestamptz,                  -- its worker's last beat; NULL: booting
    busy_at      timestamptz NOT NULL DEFAULT now(), -- it last ran something (or was made)
    ending       timestamptz,                  -- being removed: it takes no more runs
    ended_at     timestamptz,
    why          text
);
CREATE INDEX pool_machines_live ON orca.pool_machines (pool) WHERE ended_at IS NULL;
CREATE INDEX pool_machines_role ON orca.pool_machines (role) WHERE ended_at IS NULL;

ALTER TABLE orca.runs ADD COLUMN machine bigint;
-- Queued runs in the order they are taken, oldest first (queued_at, then
-- id). Ordering by a key the primary key can't provide keeps the planner
-- on this index: ORDER BY id would walk the primary key past every
-- finished run older than the queue (the planner assumes queued runs are
-- spread evenly over ids).
CREATE INDEX runs_queued_order ON orca.runs (pipeline, queued_at, id) WHERE state = 'queued';
CREATE INDEX runs_machine_running ON orca.runs (machine) WHERE state = 'running';

-- The group role of every machine's login role. Roles are the cluster's, so
-- another database (another stack) may have made it already.
DO $$
BEGIN
    CREATE ROLE orca_worker NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- How an attempt ended, for the scheduler and workers alike: the run's new
-- state (queued again after the retry delay while retries are left, unless a
-- cancel was asked for), its events, and for a final failure with an alert
-- URL, the alert in the outbox. Retries, delay and URL come from the stored
-- pipeline. Returns the state the run is in, or NULL if the attempt was no
-- longer running.
-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb) made here: its body is in sql/functions/finish_attempt.sql.

-- Puts attempt (id, start) back in the queue: its process was stopped, not
-- failed (cancelled instead, if a cancel was asked for). True if it was.
-- orca.requeue_attempt(bigint,integer,text,bytea) made here: its body is in sql/functions/requeue_attempt.sql.

-- The live machine `session_user` logs in as (no row: credentials that no
-- longer stand for a machine).
-- orca.worker_machine() made here: its body is in sql/functions/worker_machine.sql.

-- A worker starting: its machine's pool, name and slots; marks it seen and
-- queues again the runs its previous worker left running.
-- orca.worker_hello() made here: its body is in sql/functions/worker_hello.sql.

-- Claims up to p_room queued runs of this machine's pool, oldest first: per
-- pipeline at most max_runs less its running ones (across every worker: the
-- count is taken under the pipeline's lock, held to the end of the claim; a
-- pipeline whose lock another claim holds is passed over this time), fill
-- runs on top, within the machine's free slots. Two workers never take one
-- run (FOR UPDATE SKIP LOCKED); a machine being removed takes none.
-- orca.worker_claim(integer) made here: its body is in sql/functions/worker_claim.sql.

-- Beats this machine (seen) and the attempts its worker runs; returns those
-- still running here at their start, with whether a cancel was asked for.
-- Runs on this machine its worker doesn't run are queued again.
-- orca.worker_beat(bigint[],integer[],integer[]) made here: its body is in sql/functions/worker_beat.sql.

-- The output tail of an attempt this machine runs.
-- orca.worker_output(bigint,integer,bytea) made here: its body is in sql/functions/worker_output.sql.

-- How an attempt this machine ran ended (see orca.finish_attempt).
-- orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) made here: its body is in sql/functions/worker_finish.sql.

-- An attempt this machine's worker stopped (it was told to stop): queued again.
-- orca.worker_requeue(bigint,integer,text,bytea) made here: its body is in sql/functions/worker_requeue.sql.

-- Makes a machine's login role (its credentials): the password goes in as a
-- SCRAM verifier, so the secret itself never reaches the server or its log.
-- orca.machine_role_make(text,text) made here: its body is in sql/functions/machine_role_make.sql.

-- Revokes a machine's credentials: no more logins, its sessions ended. Safe
-- to repeat. (Committed before the role is dropped, so a role that can't be
-- dropped yet is still shut out.)
-- orca.machine_role_revoke(text) made here: its body is in sql/functions/machine_role_revoke.sql.

-- Drops a revoked machine's role with whatever it owns (a large object it
-- made, say). False if it can't be dropped now (a session still ending):
-- the scaler tries again on a later pass.
-- orca.machine_role_drop(text) made here: its body is in sql/functions/machine_role_drop.sql.

GRANT USAGE ON SCHEMA orca TO orca_worker;
