-- Hardening against what machine and instance logins send and do
-- (docs/security.md): what they may store is bounded, locks only orca's own
-- functions take are row locks on orca's tables (which those logins can't
-- reach) instead of advisory keys anyone can take, their roles get
-- connection limits and timeouts, and orca's role can drop them without
-- being a superuser.

-- The longest `why` an attempt's end or requeue stores, in characters.
-- (Output is cut to its last 64 KiB, as orca.worker_output always did.)
CREATE FUNCTION orca.bounded_why(p_why text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN length(p_why) > 4096 THEN left(p_why, 4080) || ' … (cut)' ELSE p_why END
$$;

CREATE FUNCTION orca.bounded_output(p_output bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT substring(p_output FROM greatest(octet_length(p_output) - 65535, 1))
$$;

-- How an attempt ended (as before: see migration 0003), with what it stores
-- bounded whoever calls it: `why` to 4096 characters, output to its last
-- 64 KiB, and the alert's body built here from the run's own facts, the
-- caller giving only the output's last 4 KiB (a machine can't write the
-- webhook's other fields).
CREATE OR REPLACE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    spec jsonb;
    tries integer;
    delay float8;
    url text;
    r record;
    tail text;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'bad state %', left(p_state, 40) USING ERRCODE = '22023';
    END IF;
    p_why := orca.bounded_why(p_why);
    p_output := orca.bounded_output(p_output);
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
        tail := CASE WHEN jsonb_typeof(p_body -> 'output') = 'string'
                     THEN right(p_body ->> 'output', 4096) ELSE '' END;
        INSERT INTO orca.alerts (run, pipeline, url, body) VALUES (r.id, r.pipeline, url,
            jsonb_build_object('pipeline', r.pipeline, 'run', r.id, 'start', p_start,
                'state', 'failed', 'exit_code', p_code, 'exit_signal', p_signal,
                'why', p_why, 'output', tail));
    END IF;
    RETURN r.state;
END
$$;

-- Puts attempt (id, start) back in the queue (as before), `why` and output
-- bounded as above.
CREATE OR REPLACE FUNCTION orca.requeue_attempt(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    p_why := orca.bounded_why(p_why);
    p_output := orca.bounded_output(p_output);
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

-- A beat names at most this many attempts (a machine runs `slots` at once;
-- an instance heads one): more is refused, not unnested.
CREATE FUNCTION orca.check_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) > 1024 OR coalesce(cardinality(p_starts), 0) > 1024
       OR coalesce(cardinality(p_pids), 0) > 1024 THEN
        RAISE EXCEPTION 'a beat names at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    PERFORM orca.check_beat(p_ids, p_starts, p_pids);
    UPDATE orca.pool_machines SET seen_at = clock_timestamp(),
        busy_at = CASE WHEN cardinality(p_ids) > 0 THEN now() ELSE busy_at END
    WHERE pool_machines.id = m.id;
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

CREATE OR REPLACE FUNCTION orca.instance_head_beat(p_ids bigint[], p_starts integer[], p_pids integer[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM orca.check_beat(p_ids, p_starts, p_pids);
    RETURN QUERY
    UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
    FROM unnest(p_ids, p_starts, p_pids) AS b(id, start, pid)
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running'
      AND orca.instance_heads(b.id, b.start)
    RETURNING r.id, r.cancel;
END
$$;

-- Claims serialise per pipeline on a row of this table (one per pipeline,
-- kept by a trigger), locked FOR UPDATE SKIP LOCKED inside
-- orca.worker_claim: only that function can take it, unlike the advisory
-- key 1869767526 it replaces, which any login could hold.
CREATE TABLE orca.claim_locks (
    pipeline text PRIMARY KEY
);
INSERT INTO orca.claim_locks SELECT name FROM orca.pipelines ON CONFLICT DO NOTHING;

CREATE FUNCTION orca.claim_lock_add() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO orca.claim_locks (pipeline) VALUES (NEW.name) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER pipelines_claim_lock AFTER INSERT ON orca.pipelines
FOR EACH ROW EXECUTE FUNCTION orca.claim_lock_add();

CREATE OR REPLACE FUNCTION orca.worker_claim(p_room integer)
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
        PERFORM 1 FROM orca.claim_locks l WHERE l.pipeline = c.name FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
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

-- A machine's or instance's login role: at most 4 sessions (a worker needs
-- 2), and timeouts a careless client gets by default. A hostile one can SET
-- them back; the scheduler ends its sessions that stay in a transaction
-- (sql/logins_stuck_end.sql), and its own statements wait on no lock for
-- more than 2 s.
CREATE FUNCTION orca.login_role_make(p_role text, p_verifier text, p_group text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_group NOT IN ('orca_worker', 'orca_instance') THEN
        RAISE EXCEPTION 'not a login group: %', p_group;
    END IF;
    EXECUTE format('CREATE ROLE %I LOGIN CONNECTION LIMIT 4 PASSWORD %L IN ROLE %I',
                   p_role, p_verifier, p_group);
    -- orca's role a member of it: it sees the login's sessions in
    -- pg_stat_activity (to end one stuck in a transaction) and may drop
    -- what it owns.
    EXECUTE format('GRANT %I TO %I', p_role, current_user);
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', p_role, '10s');
    EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', p_role, '5s');
    EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', p_role, '5s');
END
$$;

CREATE OR REPLACE FUNCTION orca.machine_role_make(p_role text, p_verifier text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM orca.login_role_make(p_role, p_verifier, 'orca_worker');
END
$$;

CREATE OR REPLACE FUNCTION orca.instance_role_make(p_role text, p_verifier text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM orca.login_role_make(p_role, p_verifier, 'orca_instance');
END
$$;

-- Drops a revoked login role with whatever it owns (a large object it
-- made, say). DROP OWNED needs the role's privileges, which a CREATEROLE
-- role that is not a superuser gets by granting the role to itself first.
-- False if it can't be dropped now (a session still ending): tried again
-- on a later pass.
CREATE OR REPLACE FUNCTION orca.machine_role_drop(p_role text)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        PERFORM orca.machine_role_revoke(p_role);
        IF NOT pg_has_role(current_user, p_role, 'USAGE') THEN
            EXECUTE format('GRANT %I TO %I', p_role, current_user);
        END IF;
        EXECUTE format('DROP OWNED BY %I', p_role);
        EXECUTE format('DROP ROLE %I', p_role);
    END IF;
    RETURN true;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'role % can''t be dropped now: %', p_role, SQLERRM;
    RETURN false;
END
$$;

-- Logins made before this migration: orca's role a member of each too, and
-- the same limits and timeouts as new ones.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT m.rolname FROM pg_roles m
             JOIN pg_auth_members a ON a.member = m.oid
             JOIN pg_roles g ON g.oid = a.roleid
             WHERE g.rolname IN ('orca_worker', 'orca_instance') AND m.rolcanlogin
               AND NOT pg_has_role(current_user, m.oid, 'USAGE')
    LOOP
        BEGIN
            EXECUTE format('GRANT %I TO %I', r.rolname, current_user);
            EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 4', r.rolname);
            EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', r.rolname, '10s');
            EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', r.rolname, '5s');
            EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', r.rolname, '5s');
        EXCEPTION WHEN insufficient_privilege THEN
            NULL; -- another stack's login, not ours to manage
        WHEN undefined_object THEN
            NULL; -- dropped since it was listed (another stack removed its machine)
        WHEN unique_violation THEN
            NULL; -- granted meanwhile by another database's migration, at once
        END;
    END LOOP;
END
$$;

-- A machine's or instance's first login replaces the secret it booted with
-- (which sits in user-data, readable by any process on the machine): the
-- login sets its own role's password to SCRAM verifier p_verifier. Only for
-- the machine and instance logins orca makes; never a plain password.
CREATE FUNCTION orca.login_rotate(p_verifier text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_auth_members m
                   JOIN pg_roles g ON g.oid = m.roleid
                   JOIN pg_roles r ON r.oid = m.member
                   WHERE r.rolname = session_user AND g.rolname IN ('orca_worker', 'orca_instance')) THEN
        RAISE EXCEPTION 'only a machine or instance login rotates its secret' USING ERRCODE = '42501';
    END IF;
    IF p_verifier !~ '^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$'
       OR length(p_verifier) > 512 THEN
        RAISE EXCEPTION 'not a SCRAM-SHA-256 verifier' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('ALTER ROLE %I PASSWORD %L', session_user, p_verifier);
END
$$;
REVOKE ALL ON FUNCTION orca.login_rotate(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.login_rotate(text) TO orca_worker, orca_instance;

REVOKE ALL ON FUNCTION orca.bounded_why(text), orca.bounded_output(bytea),
    orca.check_beat(bigint[], integer[], integer[]), orca.claim_lock_add(),
    orca.login_role_make(text, text, text) FROM PUBLIC;
REVOKE ALL ON TABLE orca.claim_locks FROM PUBLIC;
