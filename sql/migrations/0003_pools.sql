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
CREATE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    spec jsonb;
    tries integer;
    delay float8;
    url text;
    r record;
BEGIN
    SELECT p.spec INTO spec FROM orca.pipelines p JOIN orca.runs x ON x.pipeline = p.name
    WHERE x.id = p_id;
    tries := coalesce((spec ->> 'retries')::integer, 0);
    delay := coalesce((spec ->> 'retry_delay')::float8, 0);
    url := spec ->> 'alert';
    UPDATE orca.runs SET
        state = CASE WHEN p_state = 'failed' AND failures < tries AND NOT cancel THEN 'queued' ELSE p_state END,
        failures = failures + CASE WHEN p_state = 'failed' THEN 1 ELSE 0 END,
        not_before = CASE WHEN p_state = 'failed' AND failures < tries AND NOT cancel
                          THEN now() + make_interval(secs => delay) ELSE not_before END,
        ended_at = now(), heartbeat = NULL,
        exit_code = p_code, exit_signal = p_signal, why = p_why, output = p_output
    WHERE id = p_id AND start = p_start AND state = 'running'
    RETURNING id, pipeline, state, failures INTO r;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO orca.events (run, pipeline, kind, why) VALUES (r.id, r.pipeline, p_state, p_why);
    IF r.state = 'queued' THEN
        INSERT INTO orca.events (run, pipeline, kind, why)
        VALUES (r.id, r.pipeline, 'retried', format('retry %s of %s in %ss', r.failures, tries, delay));
    END IF;
    IF r.state = 'failed' AND url IS NOT NULL THEN
        INSERT INTO orca.alerts (run, pipeline, url, body) VALUES (r.id, r.pipeline, url, p_body);
    END IF;
    RETURN r.state;
END
$$;

-- Puts attempt (id, start) back in the queue: its process was stopped, not
-- failed (cancelled instead, if a cancel was asked for). True if it was.
CREATE FUNCTION orca.requeue_attempt(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(), why = p_why, output = p_output
    WHERE id = p_id AND start = p_start AND state = 'running'
    RETURNING id, pipeline, state INTO r;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO orca.events (run, pipeline, kind, why)
    VALUES (r.id, r.pipeline, CASE WHEN r.state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, p_why);
    RETURN true;
END
$$;

-- The live machine `session_user` logs in as (no row: credentials that no
-- longer stand for a machine).
CREATE FUNCTION orca.worker_machine() RETURNS orca.pool_machines
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines;
BEGIN
    SELECT * INTO m FROM orca.pool_machines WHERE role = session_user AND ended_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live machine logs in as this role' USING ERRCODE = '42501';
    END IF;
    RETURN m;
END
$$;

-- A worker starting: its machine's pool, name and slots; marks it seen and
-- queues again the runs its previous worker left running.
CREATE FUNCTION orca.worker_hello(OUT pool text, OUT name text, OUT slots integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
    r record;
BEGIN
    UPDATE orca.pool_machines SET seen_at = clock_timestamp() WHERE id = m.id;
    -- A worker starting runs nothing yet: runs still running on this machine
    -- were its previous worker's, whose processes died with it.
    FOR r IN SELECT x.id, x.start FROM orca.runs x WHERE x.machine = m.id AND x.state = 'running' LOOP
        PERFORM orca.requeue_attempt(r.id, r.start,
            format('the worker on machine %s started again', m.name), ''::bytea);
    END LOOP;
    pool := m.pool;
    name := m.name;
    slots := m.slots;
END
$$;

-- Claims up to p_room queued runs of this machine's pool, oldest first: per
-- pipeline at most max_runs less its running ones (across every worker: the
-- count is taken under the pipeline's lock, held to the end of the claim; a
-- pipeline whose lock another claim holds is passed over this time), fill
-- runs on top, within the machine's free slots. Two workers never take one
-- run (FOR UPDATE SKIP LOCKED); a machine being removed takes none.
CREATE FUNCTION orca.worker_claim(p_room integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
    c record;
    taken integer := 0;
    busy integer;
    run_id bigint;
    claimed bigint[] := '{}';
BEGIN
    -- The machine's row, locked: a removal marks it ending under the same
    -- lock, so a claim and a removal never cross.
    PERFORM 1 FROM orca.pool_machines pm WHERE pm.id = m.id AND pm.ending IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    p_room := least(p_room, m.slots - (SELECT count(*) FROM orca.runs r
                                       WHERE r.machine = m.id AND r.state = 'running'));
    FOR c IN
        SELECT p.name, p.max_runs FROM orca.pipelines p
        CROSS JOIN LATERAL (
            SELECT r.queued_at, r.id FROM orca.runs r
            WHERE r.pipeline = p.name AND r.state = 'queued' AND r.not_before <= now()
            ORDER BY r.queued_at, r.id LIMIT 1
        ) oldest
        WHERE p.placement = 'worker:' || m.pool AND NOT p.paused AND NOT p.retired
        ORDER BY oldest.queued_at, oldest.id
    LOOP
        EXIT WHEN taken >= p_room;
        -- Another worker claiming this pipeline's runs right now: leave it
        -- to that one (this worker tries again on its next round).
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(1869767526, hashtext(c.name));
        SELECT count(*) INTO busy FROM orca.runs r
        WHERE r.pipeline = c.name AND r.state = 'running' AND NOT r.fill;
        FOR run_id IN
            (SELECT r.id FROM orca.runs r
             WHERE r.pipeline = c.name AND r.state = 'queued' AND NOT r.fill AND r.not_before <= now()
             ORDER BY r.queued_at, r.id LIMIT greatest(least(c.max_runs - busy, p_room - taken), 0)
             FOR UPDATE SKIP LOCKED)
        LOOP
            UPDATE orca.runs r SET state = 'running', start = r.start + 1, started_at = now(),
                ended_at = NULL, heartbeat = now(), host = m.name, pid = NULL, instance = NULL,
                machine = m.id, cancel = false, exit_code = NULL, exit_signal = NULL, why = NULL,
                output = ''::bytea
            WHERE r.id = run_id;
            claimed := claimed || run_id;
            taken := taken + 1;
        END LOOP;
        FOR run_id IN
            (SELECT r.id FROM orca.runs r
             WHERE r.pipeline = c.name AND r.state = 'queued' AND r.fill AND r.not_before <= now()
             ORDER BY r.queued_at, r.id LIMIT greatest(p_room - taken, 0)
             FOR UPDATE SKIP LOCKED)
        LOOP
            UPDATE orca.runs r SET state = 'running', start = r.start + 1, started_at = now(),
                ended_at = NULL, heartbeat = now(), host = m.name, pid = NULL, instance = NULL,
                machine = m.id, cancel = false, exit_code = NULL, exit_signal = NULL, why = NULL,
                output = ''::bytea
            WHERE r.id = run_id;
            claimed := claimed || run_id;
            taken := taken + 1;
        END LOOP;
    END LOOP;
    IF taken > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp() WHERE pool_machines.id = m.id;
    END IF;
    RETURN QUERY
    WITH mine AS (
        SELECT r.id, r.start, r.pipeline, r.args FROM orca.runs r WHERE r.id = ANY(claimed)
    ), e AS (
        INSERT INTO orca.events (run, pipeline, kind, why)
        SELECT x.id, x.pipeline, 'started', format('attempt %s on machine %s', x.start, m.name) FROM mine x
    )
    SELECT x.id, x.start, x.pipeline, x.args, p.spec FROM mine x
    JOIN orca.pipelines p ON p.name = x.pipeline ORDER BY x.id;
END
$$;

-- Beats this machine (seen) and the attempts its worker runs; returns those
-- still running here at their start, with whether a cancel was asked for.
-- Runs on this machine its worker doesn't run are queued again.
CREATE FUNCTION orca.worker_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    UPDATE orca.pool_machines SET seen_at = clock_timestamp(),
        busy_at = CASE WHEN cardinality(p_ids) > 0 THEN now() ELSE busy_at END
    WHERE pool_machines.id = m.id;
    -- Running here, yet not among the worker's attempts for 15 s (a claim
    -- whose answer was lost, a process that could not be started): queued
    -- again, since nothing runs them.
    PERFORM orca.requeue_attempt(x.id, x.start,
        format('the worker on machine %s was not running it', m.name), x.output)
    FROM orca.runs x
    WHERE x.machine = m.id AND x.state = 'running' AND NOT (x.id = ANY(p_ids))
      AND x.heartbeat < now() - interval '15 seconds';
    RETURN QUERY
    UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
    FROM unnest(p_ids, p_starts, p_pids) AS b(id, start, pid)
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running' AND r.machine = m.id
    RETURNING r.id, r.cancel;
END
$$;

-- The output tail of an attempt this machine runs.
CREATE FUNCTION orca.worker_output(p_id bigint, p_start integer, p_output bytea)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    UPDATE orca.runs SET output = substring(p_output FROM greatest(octet_length(p_output) - 65535, 1))
    WHERE id = p_id AND start = p_start AND state = 'running' AND machine = m.id;
END
$$;

-- How an attempt this machine ran ended (see orca.finish_attempt).
CREATE FUNCTION orca.worker_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'bad state %', p_state;
    END IF;
    PERFORM 1 FROM orca.runs
    WHERE id = p_id AND start = p_start AND machine = m.id AND state = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- (busy_at needs no write here: the worker's beats keep it fresh while
    -- the run runs.)
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body);
END
$$;

-- An attempt this machine's worker stopped (it was told to stop): queued again.
CREATE FUNCTION orca.worker_requeue(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    PERFORM 1 FROM orca.runs
    WHERE id = p_id AND start = p_start AND machine = m.id AND state = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN orca.requeue_attempt(p_id, p_start, p_why, p_output);
END
$$;

-- Makes a machine's login role (its credentials): the password goes in as a
-- SCRAM verifier, so the secret itself never reaches the server or its log.
CREATE FUNCTION orca.machine_role_make(p_role text, p_verifier text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE orca_worker', p_role, p_verifier);
END
$$;

-- Revokes a machine's credentials: no more logins, its sessions ended. Safe
-- to repeat. (Committed before the role is dropped, so a role that can't be
-- dropped yet is still shut out.)
CREATE FUNCTION orca.machine_role_revoke(p_role text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        EXECUTE format('ALTER ROLE %I NOLOGIN CONNECTION LIMIT 0', p_role);
        PERFORM pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = p_role;
    END IF;
END
$$;

-- Drops a revoked machine's role with whatever it owns (a large object it
-- made, say). False if it can't be dropped now (a session still ending):
-- the scaler tries again on a later pass.
CREATE FUNCTION orca.machine_role_drop(p_role text)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        PERFORM orca.machine_role_revoke(p_role);
        EXECUTE format('DROP OWNED BY %I', p_role);
        EXECUTE format('DROP ROLE %I', p_role);
    END IF;
    RETURN true;
EXCEPTION WHEN OTHERS THEN
    RETURN false;
END
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA orca FROM PUBLIC;
GRANT USAGE ON SCHEMA orca TO orca_worker;
GRANT EXECUTE ON FUNCTION orca.worker_hello(), orca.worker_claim(integer),
    orca.worker_beat(bigint[], integer[], integer[]),
    orca.worker_output(bigint, integer, bytea),
    orca.worker_finish(bigint, integer, text, integer, integer, text, bytea, jsonb),
    orca.worker_requeue(bigint, integer, text, bytea)
    TO orca_worker;
