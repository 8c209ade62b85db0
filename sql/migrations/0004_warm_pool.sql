-- EC2 runs' instances and the warm pool (seed 000, orca.pool): one row per
-- instance per run. The scheduler hands an idle instance to a run by ending
-- its row and inserting one for the new run, `pooled`, in one transaction;
-- the instance learns of its next run from its own rows.
--
-- An instance logs in as a role of its own (`login`), a member of
-- `orca_instance`, which may only execute the `orca.instance_*` functions
-- below: they act on rows whose login is `session_user`.

CREATE TABLE orca.instances (
    id          bigserial PRIMARY KEY,
    instance    text NOT NULL,                -- the provider's id for it
    kind        text NOT NULL DEFAULT '',     -- what it is (type, image...): which runs it may serve
    run         bigint NOT NULL,
    start       integer NOT NULL,
    role        text NOT NULL CHECK (role IN ('head', 'worker')),
    login       text NOT NULL,                -- its database role
    address     text,                         -- the head's address (workers join it)
    host        text,                         -- this instance's own address
    provider    text NOT NULL DEFAULT 'local', -- where it came from: local, ec2
    provider_id text,                         -- the provider's id for it
    region      text,                         -- ec2: where it was made
    state       text NOT NULL DEFAULT 'starting'
                CHECK (state IN ('starting', 'pooled', 'joined', 'idle', 'ended')),
    fresh_code  boolean NOT NULL DEFAULT true, -- may take new code (a run's first start)
    polled      timestamptz,                  -- an idle instance's last poll
    made_at     timestamptz NOT NULL DEFAULT now(),
    joined_at   timestamptz,
    idle_at     timestamptz,
    ended_at    timestamptz,
    why         text
);
CREATE INDEX instances_live ON orca.instances (instance) WHERE ended_at IS NULL;
CREATE INDEX instances_run ON orca.instances (run, start);
CREATE INDEX instances_login ON orca.instances (login) WHERE ended_at IS NULL;

DO $$
BEGIN
    CREATE ROLE orca_instance NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- Makes an instance's login role (its credentials), a member of
-- orca_instance; the password as a SCRAM verifier.
-- orca.instance_role_make(text,text) made here: its body is in sql/functions/instance_role_make.sql.

-- `pool-next`, first: the row of run (p_run, p_start) that instance
-- p_instance served is `idle` now (its work has stopped). False if there is
-- no such live row of this login's.
-- orca.instance_idle(text,bigint,integer) made here: its body is in sql/functions/instance_idle.sql.

-- `pool-next`, every second: beats `polled` on the idle row and looks for
-- the next. Returns 'next' with the new row's run, start, head address and
-- fresh-code flag (the new row is `joined` now), 'ended' when the instance
-- has no live row (the scheduler shut it down), else 'wait'.
-- orca.instance_poll(text,bigint,integer) made here: its body is in sql/functions/instance_poll.sql.

-- `pool-wait`: whether a worker's run (p_run, p_start) is over for instance
-- p_instance: the run is not running at that start any more, or the
-- instance's row for it has ended.
-- orca.instance_run_over(text,bigint,integer) made here: its body is in sql/functions/instance_run_over.sql.

-- `ec2-serve`: what instance p_instance serves in run (p_run, p_start): its
-- role, the head's address, whether it may take new code, and the run's
-- pipeline (its stored spec) and arguments. No row: not a live row of this
-- login's.
-- orca.instance_serve(text,bigint,integer) made here: its body is in sql/functions/instance_serve.sql.

-- Whether this login is the live head of attempt (p_id, p_start).
-- orca.instance_heads(bigint,integer) made here: its body is in sql/functions/instance_heads.sql.

-- The head beats its run's attempt: as orca.worker_beat, for the attempts
-- this login heads.
-- orca.instance_head_beat(bigint[],integer[],integer[]) made here: its body is in sql/functions/instance_head_beat.sql.

-- The output tail of the attempt this login heads.
-- orca.instance_head_output(bigint,integer,bytea) made here: its body is in sql/functions/instance_head_output.sql.

-- How the attempt this login heads ended (see orca.finish_attempt).
-- orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) made here: its body is in sql/functions/instance_head_finish.sql.

-- The attempt this login heads, stopped with its head: queued again.
-- orca.instance_head_requeue(bigint,integer,text,bytea) made here: its body is in sql/functions/instance_head_requeue.sql.

GRANT USAGE ON SCHEMA orca TO orca_instance;
