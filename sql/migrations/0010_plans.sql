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

CREATE OR REPLACE FUNCTION orca.bounded_why(p_why text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF length(p_why) > 4096 THEN
        RETURN left(p_why, 4080) || ' … (cut)';
    END IF;
    RETURN p_why;
END
$$;

CREATE OR REPLACE FUNCTION orca.bounded_output(p_output bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF octet_length(p_output) > 65536 THEN
        RETURN substring(p_output FROM octet_length(p_output) - 65535);
    END IF;
    RETURN p_output;
END
$$;

CREATE OR REPLACE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF (NEW.state <> 'running' OR NEW.start <> OLD.start)
       AND EXISTS (SELECT 1 FROM orca.output_chunks c WHERE c.run = OLD.id AND c.start = OLD.start) THEN
        IF NEW.output IS NOT DISTINCT FROM OLD.output THEN
            NEW.output := orca.output_tail(OLD.id, OLD.start, OLD.output);
        END IF;
        DELETE FROM orca.output_chunks c WHERE c.run = OLD.id AND c.start = OLD.start;
    END IF;
    RETURN NEW;
END
$$;
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
CREATE FUNCTION orca.finish_attempts(
    p_ids bigint[], p_starts integer[], p_states text[], p_codes integer[], p_signals integer[],
    p_whys text[], p_outputs bytea[], p_bodies jsonb[], p_machine bigint
) RETURNS TABLE (id bigint, state text) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    bad text;
BEGIN
    IF coalesce(cardinality(p_ids), 0) > 1024 THEN
        RAISE EXCEPTION 'at most 1024 ends at once' USING ERRCODE = '54000';
    END IF;
    SELECT coalesce(s, 'NULL') INTO bad FROM unnest(p_states) AS s
    WHERE s IS NULL OR s NOT IN ('succeeded', 'failed', 'cancelled') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'bad state %', left(bad, 40) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH e AS (
        SELECT DISTINCT ON (x.id, x.start) x.n, x.id, x.start, x.state, x.code, x.signal,
               orca.bounded_why(x.why) AS why, orca.bounded_output(x.output) AS output, x.body
        FROM unnest(p_ids, p_starts, p_states, p_codes, p_signals, p_whys, p_outputs, p_bodies)
             WITH ORDINALITY AS x(id, start, state, code, signal, why, output, body, n)
        ORDER BY x.id, x.start, x.n
    ), u AS (
        UPDATE orca.runs r SET
            state = CASE WHEN e.state = 'failed' AND r.failures < s.tries AND NOT r.cancel
                         THEN 'queued' ELSE e.state END,
            failures = r.failures + CASE WHEN e.state = 'failed' THEN 1 ELSE 0 END,
            not_before = CASE WHEN e.state = 'failed' AND r.failures < s.tries AND NOT r.cancel
                              THEN now() + make_interval(secs => s.delay) ELSE r.not_before END,
            ended_at = now(), heartbeat = NULL,
            exit_code = e.code, exit_signal = e.signal, why = e.why, output = e.output
        FROM e, orca.pipelines p,
             LATERAL (SELECT coalesce((p.spec ->> 'retries')::integer, 0) AS tries,
                             coalesce((p.spec ->> 'retry_delay')::float8, 0) AS delay) s
        WHERE r.id = e.id AND r.start = e.start AND r.state = 'running'
          AND (p_machine IS NULL OR r.machine = p_machine) AND p.name = r.pipeline
        RETURNING e.n, r.id, r.pipeline, r.state, r.failures, s.tries, s.delay,
                  p.spec ->> 'alert' AS url, e.start, e.state AS ended, e.code, e.signal, e.why, e.body
    ), ev AS (
        INSERT INTO orca.events (run, pipeline, kind, why)
        SELECT v.run, v.pipeline, v.kind, v.why FROM (
            SELECT u.n, 0 AS k, u.id AS run, u.pipeline, u.ended AS kind, u.why FROM u
            UNION ALL
            SELECT u.n, 1, u.id, u.pipeline, 'retried',
                   format('retry %s of %s in %ss', u.failures, u.tries, u.delay)
            FROM u WHERE u.state = 'queued'
        ) v
        ORDER BY v.n, v.k
    ), al AS (
        INSERT INTO orca.alerts (run, pipeline, url, body)
        SELECT u.id, u.pipeline, u.url,
               jsonb_build_object('pipeline', u.pipeline, 'run', u.id, 'start', u.start,
                   'state', 'failed', 'exit_code', u.code, 'exit_signal', u.signal, 'why', u.why,
                   'output', CASE WHEN jsonb_typeof(u.body -> 'output') = 'string'
                                  THEN right(u.body ->> 'output', 4096) ELSE '' END)
        FROM u WHERE u.state = 'failed' AND u.url IS NOT NULL
        ORDER BY u.n
    )
    SELECT x.id, u.state FROM unnest(p_ids) WITH ORDINALITY AS x(id, n)
    LEFT JOIN u ON u.n = x.n
    ORDER BY x.n;
END
$$;

-- How attempt (p_id, p_start) ended, as orca.finish_attempts has it for
-- several (the two must agree: tests/it/worker.rs checks they do), in two
-- statements (three with an alert) instead of its one for all, which costs more for one: a
-- worker's ends come one at a time. With p_machine only if it runs on that
-- machine. The run's state now, or NULL if the attempt was no longer
-- running (there).
CREATE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_machine bigint
) RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    spec jsonb;
    tries integer;
    delay float8;
    url text;
    r record;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'bad state %', left(p_state, 40) USING ERRCODE = '22023';
    END IF;
    p_why := orca.bounded_why(p_why);
    p_output := orca.bounded_output(p_output);
    SELECT p.spec INTO spec FROM orca.runs x JOIN orca.pipelines p ON p.name = x.pipeline
    WHERE x.id = p_id AND x.start = p_start AND x.state = 'running'
      AND (p_machine IS NULL OR x.machine = p_machine);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    tries := coalesce((spec ->> 'retries')::integer, 0);
    delay := coalesce((spec ->> 'retry_delay')::float8, 0);
    url := spec ->> 'alert';
    WITH u AS (
        UPDATE orca.runs SET
            state = CASE WHEN p_state = 'failed' AND failures < tries AND NOT cancel THEN 'queued' ELSE p_state END,
            failures = failures + CASE WHEN p_state = 'failed' THEN 1 ELSE 0 END,
            not_before = CASE WHEN p_state = 'failed' AND failures < tries AND NOT cancel
                              THEN now() + make_interval(secs => delay) ELSE not_before END,
            ended_at = now(), heartbeat = NULL,
            exit_code = p_code, exit_signal = p_signal, why = p_why, output = p_output
        WHERE id = p_id AND start = p_start AND state = 'running'
          AND (p_machine IS NULL OR machine = p_machine)
        RETURNING id, pipeline, state, failures
    ), e AS (
        INSERT INTO orca.events (run, pipeline, kind, why)
        SELECT u.id, u.pipeline, p_state, p_why FROM u
        UNION ALL
        SELECT u.id, u.pipeline, 'retried', format('retry %s of %s in %ss', u.failures, tries, delay)
        FROM u WHERE u.state = 'queued'
    )
    SELECT u.id, u.pipeline, u.state INTO r FROM u;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.state = 'failed' AND url IS NOT NULL THEN
        INSERT INTO orca.alerts (run, pipeline, url, body) VALUES (r.id, r.pipeline, url,
            jsonb_build_object('pipeline', r.pipeline, 'run', r.id, 'start', p_start,
                'state', 'failed', 'exit_code', p_code, 'exit_signal', p_signal, 'why', p_why,
                'output', CASE WHEN jsonb_typeof(p_body -> 'output') = 'string'
                               THEN right(p_body ->> 'output', 4096) ELSE '' END));
    END IF;
    RETURN r.state;
END
$$;

CREATE OR REPLACE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body, NULL);
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body,
                               (orca.worker_machine()).id);
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_claim(p_room integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
    c record;
    taken integer := 0;
    busy integer;
    n integer;
    locked boolean := false;
BEGIN
    IF p_room <= 0 THEN
        RETURN;
    END IF;
    FOR c IN
        SELECT p.name, p.max_runs, p.spec FROM orca.pipelines p
        CROSS JOIN LATERAL (
            SELECT r.queued_at, r.id FROM orca.runs r
            WHERE r.pipeline = p.name AND r.state = 'queued' AND r.not_before <= now()
            ORDER BY r.queued_at, r.id LIMIT 1
        ) oldest
        WHERE p.placement = 'worker:' || m.pool AND NOT p.paused AND NOT p.retired
        ORDER BY oldest.queued_at, oldest.id
    LOOP
        EXIT WHEN taken >= p_room;
        -- The machine's row, locked before the first claim: a removal marks
        -- it ending under the same lock, so a claim and a removal never
        -- cross, and two claims of one machine count its room one after the
        -- other. (Nothing queued: no lock, nothing written.)
        IF NOT locked THEN
            PERFORM 1 FROM orca.pool_machines pm
            WHERE pm.id = m.id AND pm.ending IS NULL FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            locked := true;
            p_room := least(p_room, m.slots - (SELECT count(*) FROM orca.runs r
                                               WHERE r.machine = m.id AND r.state = 'running'));
            EXIT WHEN p_room <= 0;
        END IF;
        -- Another worker claiming this pipeline's runs right now: leave it
        -- to that one (this worker tries again on its next round).
        PERFORM 1 FROM orca.claim_locks l WHERE l.pipeline = c.name FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        SELECT count(*) INTO busy FROM orca.runs r
        WHERE r.pipeline = c.name AND r.state = 'running' AND NOT r.fill;
        -- Within max_runs, then fill runs on top, up to the room left: the
        -- ids the picks found are claimed (the UPDATE's own check skips one
        -- a cancel took meanwhile) and their events written, in one
        -- statement.
        RETURN QUERY
        WITH u AS (
            UPDATE orca.runs r SET state = 'running', start = r.start + 1, started_at = now(),
                ended_at = NULL, heartbeat = now(), host = m.name, pid = NULL, instance = NULL,
                machine = m.id, cancel = false, exit_code = NULL, exit_signal = NULL, why = NULL,
                output = ''::bytea
            WHERE r.id = ANY (ARRAY(
                SELECT k.id FROM (
                    (SELECT q.id, false AS fill, q.queued_at FROM orca.runs q
                     WHERE q.pipeline = c.name AND q.state = 'queued' AND NOT q.fill
                       AND q.not_before <= now()
                     ORDER BY q.queued_at, q.id
                     LIMIT greatest(least(c.max_runs - busy, p_room - taken), 0))
                    UNION ALL
                    (SELECT q.id, true, q.queued_at FROM orca.runs q
                     WHERE q.pipeline = c.name AND q.state = 'queued' AND q.fill
                       AND q.not_before <= now()
                     ORDER BY q.queued_at, q.id
                     LIMIT p_room - taken)
                ) k
                ORDER BY k.fill, k.queued_at, k.id
                LIMIT p_room - taken))
              AND r.state = 'queued'
            RETURNING r.id, r.start, r.pipeline, r.args
        ), e AS (
            INSERT INTO orca.events (run, pipeline, kind, why)
            SELECT u.id, u.pipeline, 'started', format('attempt %s on machine %s', u.start, m.name)
            FROM u
        )
        SELECT u.id, u.start, u.pipeline, u.args, c.spec FROM u ORDER BY u.id;
        GET DIAGNOSTICS n = ROW_COUNT;
        taken := taken + n;
    END LOOP;
    IF taken > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp() WHERE pool_machines.id = m.id;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION
    orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb, bigint),
    orca.finish_attempts(bigint[], integer[], text[], integer[], integer[], text[], bytea[], jsonb[], bigint)
    FROM PUBLIC;
