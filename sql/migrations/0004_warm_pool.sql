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
CREATE FUNCTION orca.instance_role_make(p_role text, p_verifier text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE orca_instance', p_role, p_verifier);
END
$$;
REVOKE ALL ON FUNCTION orca.instance_role_make(text, text) FROM PUBLIC;

-- `pool-next`, first: the row of run (p_run, p_start) that instance
-- p_instance served is `idle` now (its work has stopped). False if there is
-- no such live row of this login's.
CREATE FUNCTION orca.instance_idle(p_instance text, p_run bigint, p_start integer)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE orca.instances SET state = 'idle', idle_at = coalesce(idle_at, now()),
        polled = clock_timestamp()
    WHERE instance = p_instance AND run = p_run AND start = p_start
      AND login = session_user AND ended_at IS NULL;
    RETURN FOUND;
END
$$;

-- `pool-next`, every second: beats `polled` on the idle row and looks for
-- the next. Returns 'next' with the new row's run, start, head address and
-- fresh-code flag (the new row is `joined` now), 'ended' when the instance
-- has no live row (the scheduler shut it down), else 'wait'.
CREATE FUNCTION orca.instance_poll(p_instance text, p_run bigint, p_start integer,
    OUT outcome text, OUT run bigint, OUT start integer, OUT address text, OUT fresh_code boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    r orca.instances;
BEGIN
    SELECT * INTO r FROM orca.instances i
    WHERE i.instance = p_instance AND i.login = session_user AND i.ended_at IS NULL
      AND i.state = 'pooled'
    ORDER BY i.id DESC LIMIT 1
    FOR UPDATE;
    IF FOUND THEN
        UPDATE orca.instances SET state = 'joined', joined_at = now() WHERE id = r.id;
        outcome := 'next';
        run := r.run;
        start := r.start;
        address := coalesce(r.address, '-');
        fresh_code := r.fresh_code;
        RETURN;
    END IF;
    UPDATE orca.instances i SET polled = clock_timestamp()
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL;
    IF FOUND THEN
        outcome := 'wait';
    ELSIF EXISTS (SELECT 1 FROM orca.instances i WHERE i.instance = p_instance
                  AND i.login = session_user AND i.ended_at IS NULL) THEN
        outcome := 'wait';
    ELSE
        outcome := 'ended';
    END IF;
END
$$;

-- `pool-wait`: whether a worker's run (p_run, p_start) is over for instance
-- p_instance: the run is not running at that start any more, or the
-- instance's row for it has ended.
CREATE FUNCTION orca.instance_run_over(p_instance text, p_run bigint, p_start integer)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM orca.instances i
                   WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
                     AND i.login = session_user AND i.ended_at IS NULL) THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM orca.runs r
                       WHERE r.id = p_run AND r.start = p_start AND r.state = 'running');
END
$$;

-- `ec2-serve`: what instance p_instance serves in run (p_run, p_start): its
-- role, the head's address, whether it may take new code, and the run's
-- pipeline (its stored spec) and arguments. No row: not a live row of this
-- login's.
CREATE FUNCTION orca.instance_serve(p_instance text, p_run bigint, p_start integer)
RETURNS TABLE (role text, address text, fresh_code boolean, spec jsonb, args text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    UPDATE orca.instances i SET state = 'joined', joined_at = coalesce(i.joined_at, now())
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL AND i.state IN ('starting', 'pooled');
    RETURN QUERY
    SELECT i.role, coalesce(i.address, '-'), i.fresh_code, p.spec, r.args
    FROM orca.instances i
    JOIN orca.runs r ON r.id = i.run
    JOIN orca.pipelines p ON p.name = r.pipeline
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL;
END
$$;

-- Whether this login is the live head of attempt (p_id, p_start).
CREATE FUNCTION orca.instance_heads(p_id bigint, p_start integer) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM orca.instances i
                   WHERE i.run = p_id AND i.start = p_start AND i.role = 'head'
                     AND i.login = session_user AND i.ended_at IS NULL)
$$;

-- The head beats its run's attempt: as orca.worker_beat, for the attempts
-- this login heads.
CREATE FUNCTION orca.instance_head_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
    FROM unnest(p_ids, p_starts, p_pids) AS b(id, start, pid)
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running'
      AND orca.instance_heads(b.id, b.start)
    RETURNING r.id, r.cancel;
END
$$;

-- The output tail of the attempt this login heads.
CREATE FUNCTION orca.instance_head_output(p_id bigint, p_start integer, p_output bytea)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE orca.runs SET output = substring(p_output FROM greatest(octet_length(p_output) - 65535, 1))
    WHERE id = p_id AND start = p_start AND state = 'running' AND orca.instance_heads(p_id, p_start);
END
$$;

-- How the attempt this login heads ended (see orca.finish_attempt).
CREATE FUNCTION orca.instance_head_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'cancelled') OR NOT orca.instance_heads(p_id, p_start) THEN
        RETURN NULL;
    END IF;
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body);
END
$$;

-- The attempt this login heads, stopped with its head: queued again.
CREATE FUNCTION orca.instance_head_requeue(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT orca.instance_heads(p_id, p_start) THEN
        RETURN false;
    END IF;
    RETURN orca.requeue_attempt(p_id, p_start, p_why, p_output);
END
$$;

REVOKE ALL ON FUNCTION orca.instance_serve(text, bigint, integer),
    orca.instance_heads(bigint, integer),
    orca.instance_head_beat(bigint[], integer[], integer[]),
    orca.instance_head_output(bigint, integer, bytea),
    orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb),
    orca.instance_head_requeue(bigint, integer, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.instance_serve(text, bigint, integer),
    orca.instance_head_beat(bigint[], integer[], integer[]),
    orca.instance_head_output(bigint, integer, bytea),
    orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb),
    orca.instance_head_requeue(bigint, integer, text, bytea) TO orca_instance;

REVOKE ALL ON FUNCTION orca.instance_idle(text, bigint, integer),
    orca.instance_poll(text, bigint, integer),
    orca.instance_run_over(text, bigint, integer) FROM PUBLIC;
GRANT USAGE ON SCHEMA orca TO orca_instance;
GRANT EXECUTE ON FUNCTION orca.instance_idle(text, bigint, integer),
    orca.instance_poll(text, bigint, integer),
    orca.instance_run_over(text, bigint, integer) TO orca_instance;
