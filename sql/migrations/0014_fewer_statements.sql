-- Migration 14: a worker's round in fewer statements (issue 14's claims a
-- second).
--
-- Most of a round's cost is not its reads but its statements: each one
-- that touches orca.runs opens the table and its indexes, and an UPDATE of
-- it also its constraints and trigger (executor start-up was a fifth of a
-- round's instructions). Migration 13's round that ends a run and claims
-- the next made five statements beyond the two UPDATEs of orca.runs that
-- it needs; they are folded into others here, with the same results:
--
-- * orca.finish_attempt read the attempt's pipeline spec (its retries,
--   retry delay, alert) and then updated the attempt: the UPDATE now joins
--   orca.pipelines and reads the spec itself.
-- * orca.worker_round scanned its machine's running attempts for ones no
--   longer beaten (to queue them again), and the claim then counted them
--   again for the machine's room: one scan now does both.
-- * The claim probed a pipeline for a run queued and due, then took its
--   claim lock: in a round (whose machine's row is locked already) the
--   probe is the lock's one-time condition, so that with nothing queued
--   no lock is taken, as before. (orca.worker_claim, which locks the
--   machine's row only once it knows there is a run to claim, keeps the
--   probe on its own.)
-- * The claim counted a pipeline's running attempts for max_runs, then
--   picked its runs: the count is now part of the pick's limit.
-- * orca.worker_round called orca.check_beat for the bound of its beat's
--   arrays: the bound is now checked in the round.
-- * orca.bounded_why and orca.bounded_output were plpgsql functions with
--   their own search_path: each call set it and set it back (a round
--   calls each once an end). They are now SQL expressions the planner
--   inlines where they are used, every name in them schema-qualified, so
--   that they need no search_path of their own.
-- * orca.output_fold (the trigger of every end) set its search_path and
--   plan_cache_mode, and set them back, on each call: its names and
--   operators are now schema-qualified instead, and its two statements are
--   lookups by key, planned alike either way.
--
-- Measured as migration 13 was (bench/pools.rs's claims database, one
-- session under valgrind, a round that ends a run and claims the next):
-- 2.08 M instructions a round before, 1.94 M after (7 % fewer). The rest
-- is the two UPDATEs of orca.runs and their events, the machine's row and
-- the claim lock, and what plpgsql costs a call.

CREATE OR REPLACE FUNCTION orca.bounded_why(p_why text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN pg_catalog.length(p_why) OPERATOR(pg_catalog.>) 4096
                THEN pg_catalog.left(p_why, 4080) OPERATOR(pg_catalog.||) ' … (cut)'::pg_catalog.text
                ELSE p_why END
$$;
ALTER FUNCTION orca.bounded_why(text) RESET ALL;

CREATE OR REPLACE FUNCTION orca.bounded_output(p_output bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN pg_catalog.octet_length(p_output) OPERATOR(pg_catalog.>) 65536
                THEN pg_catalog.substring(p_output,
                    pg_catalog.octet_length(p_output) OPERATOR(pg_catalog.-) 65535)
                ELSE p_output END
$$;
ALTER FUNCTION orca.bounded_output(bytea) RESET ALL;

-- As migration 10's, but with no settings of its own (see above).
CREATE OR REPLACE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.state OPERATOR(pg_catalog.<>) 'running'::pg_catalog.text
        OR NEW.start OPERATOR(pg_catalog.<>) OLD.start)
       AND EXISTS (SELECT 1 FROM orca.output_chunks c
                   WHERE c.run OPERATOR(pg_catalog.=) OLD.id
                     AND c.start OPERATOR(pg_catalog.=) OLD.start) THEN
        -- (runs.output is never NULL: = is IS NOT DISTINCT FROM here,
        -- whose operator can't be named.)
        IF NEW.output OPERATOR(pg_catalog.=) OLD.output THEN
            NEW.output := orca.output_tail(OLD.id, OLD.start, OLD.output);
        END IF;
        DELETE FROM orca.output_chunks c
        WHERE c.run OPERATOR(pg_catalog.=) OLD.id AND c.start OPERATOR(pg_catalog.=) OLD.start;
    END IF;
    RETURN NEW;
END
$$;
ALTER FUNCTION orca.output_fold() RESET ALL;

CREATE OR REPLACE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_machine bigint
) RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r record;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'bad state %', left(p_state, 40) USING ERRCODE = '22023';
    END IF;
    -- Queued again after its retry delay while retries are left (unless a
    -- cancel was asked for), with its events; the spec's retries and
    -- retry_delay read in the statement (failures is the old count in SET).
    WITH u AS (
        UPDATE orca.runs x SET
            state = CASE WHEN p_state = 'failed' AND NOT x.cancel
                          AND x.failures < coalesce((p.spec ->> 'retries')::integer, 0)
                         THEN 'queued' ELSE p_state END,
            failures = x.failures + CASE WHEN p_state = 'failed' THEN 1 ELSE 0 END,
            not_before = CASE WHEN p_state = 'failed' AND NOT x.cancel
                               AND x.failures < coalesce((p.spec ->> 'retries')::integer, 0)
                              THEN now() + make_interval(secs => coalesce((p.spec ->> 'retry_delay')::float8, 0))
                              ELSE x.not_before END,
            ended_at = now(), heartbeat = NULL,
            exit_code = p_code, exit_signal = p_signal, why = orca.bounded_why(p_why),
            output = orca.bounded_output(p_output)
        FROM orca.pipelines p
        WHERE p.name = x.pipeline
          AND x.id = p_id AND x.start = p_start AND x.state = 'running' COLLATE "C"
          AND (p_machine IS NULL OR x.machine = p_machine)
        RETURNING x.id, x.pipeline, x.state, x.failures, x.why,
            coalesce((p.spec ->> 'retries')::integer, 0) AS tries,
            coalesce((p.spec ->> 'retry_delay')::float8, 0) AS delay, p.spec ->> 'alert' AS url
    ), e AS (
        INSERT INTO orca.events (run, pipeline, kind, why)
        SELECT u.id, u.pipeline, p_state, u.why FROM u
        UNION ALL
        SELECT u.id, u.pipeline, 'retried', format('retry %s of %s in %ss', u.failures, u.tries, u.delay)
        FROM u WHERE u.state = 'queued'
    )
    SELECT u.id, u.pipeline, u.state, u.why, u.url INTO r FROM u;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.state = 'failed' AND r.url IS NOT NULL THEN
        INSERT INTO orca.alerts (run, pipeline, url, body) VALUES (r.id, r.pipeline, r.url,
            jsonb_build_object('pipeline', r.pipeline, 'run', r.id, 'start', p_start,
                'state', 'failed', 'exit_code', p_code, 'exit_signal', p_signal, 'why', r.why,
                'output', CASE WHEN jsonb_typeof(p_body -> 'output') = 'string'
                               THEN right(p_body ->> 'output', 4096) ELSE '' END));
    END IF;
    RETURN r.state;
END
$$;

-- Claims up to p_room queued runs of machine m's pool for it, as
-- migration 13's orca.claim_runs. With p_running (a round's: its machine's
-- row locked, its running attempts counted under that lock), the machine's
-- room is counted from it; without (orca.worker_claim's), the machine's
-- row is locked before the first claim and its attempts counted then.
CREATE FUNCTION orca.claim_runs(m orca.pool_machines, p_room integer, p_running integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    c record;
    taken integer := 0;
    n integer;
    locked boolean := p_running IS NOT NULL;
BEGIN
    IF p_running IS NOT NULL THEN
        p_room := least(p_room, m.slots - p_running);
    END IF;
    IF p_room <= 0 THEN
        RETURN;
    END IF;
    -- The pool's pipelines in turn: the one that took its turn longest ago
    -- (or never) first.
    FOR c IN
        SELECT p.name, p.max_runs, p.spec FROM orca.pipelines p
        JOIN orca.claim_locks l ON l.pipeline = p.name
        WHERE p.placement = 'worker:' || m.pool AND NOT p.paused AND NOT p.retired
        ORDER BY l.claimed_at NULLS FIRST, p.name
    LOOP
        EXIT WHEN taken >= p_room;
        IF NOT locked THEN
            -- Nothing of it queued and due: no lock, nothing written. (In
            -- the order of runs_queued_order, so that it is read from its
            -- start: an EXISTS would leave the planner free to read the
            -- table until it meets one, which it does after ANALYZE.)
            PERFORM 1 FROM orca.runs r
            WHERE r.pipeline = c.name AND r.state = 'queued' AND r.not_before <= now()
            ORDER BY r.fill, r.queued_at, r.id LIMIT 1;
            CONTINUE WHEN NOT FOUND;
            -- The machine's row, locked before the first claim: a removal
            -- marks it ending under the same lock, so a claim and a removal
            -- never cross, and two claims of one machine count its room one
            -- after the other.
            PERFORM 1 FROM orca.pool_machines pm
            WHERE pm.id = m.id AND pm.ending IS NULL FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            locked := true;
            p_room := least(p_room, m.slots - (SELECT count(*) FROM orca.runs r
                                               WHERE r.machine = m.id AND r.state = 'running' COLLATE "C"));
            EXIT WHEN p_room <= 0;
        END IF;
        -- Another worker claiming this pipeline's runs right now: leave it
        -- to that one (this worker tries again on its next round).
        -- Otherwise its lock is taken and so is its turn, whatever this
        -- claim takes of it. Its lock only if a run of it is queued and due
        -- (the subquery is the lock's one-time condition, read before it:
        -- a scalar one, in the order of runs_queued_order, for the reason
        -- above).
        UPDATE orca.claim_locks l SET claimed_at = clock_timestamp()
        WHERE l.pipeline = (
            SELECT k.pipeline FROM orca.claim_locks k
            WHERE k.pipeline = c.name
              AND (SELECT r.id FROM orca.runs r
                   WHERE r.pipeline = c.name AND r.state = 'queued' AND r.not_before <= now()
                   ORDER BY r.fill, r.queued_at, r.id LIMIT 1) IS NOT NULL
            FOR UPDATE SKIP LOCKED);
        CONTINUE WHEN NOT FOUND;
        -- Within max_runs (less its running attempts but fill runs), then
        -- fill runs on top, up to the room left: the ids the picks found are
        -- claimed (the UPDATE's own check skips one a cancel took
        -- meanwhile) and their events written, in one statement.
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
                     LIMIT greatest(least(c.max_runs - (SELECT count(*) FROM orca.runs b
                                                        WHERE b.pipeline = c.name
                                                          AND b.state = 'running' AND NOT b.fill),
                                          p_room - taken), 0))
                    UNION ALL
                    (SELECT q.id, true, q.queued_at FROM orca.runs q
                     WHERE q.pipeline = c.name AND q.state = 'queued' AND q.fill
                       AND q.not_before <= now()
                     ORDER BY q.queued_at, q.id
                     LIMIT p_room - taken)
                ) k
                ORDER BY k.fill, k.queued_at, k.id
                LIMIT p_room - taken))
              AND r.state = 'queued' COLLATE "C"
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
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_claim(p_room integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
    n integer;
BEGIN
    RETURN QUERY SELECT c.id, c.start, c.pipeline, c.args, c.spec
    FROM orca.claim_runs(m, p_room, NULL::integer) c;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp()
        WHERE pool_machines.id = m.id;
    END IF;
END
$$;

-- As migration 13's, in fewer statements (above).
CREATE OR REPLACE FUNCTION orca.worker_round(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[],
    p_room integer,
    p_end_ids bigint[], p_end_starts integer[], p_end_states text[], p_end_codes integer[],
    p_end_signals integer[], p_end_whys text[], p_end_outputs bytea[], p_end_bodies jsonb[])
RETURNS TABLE (kind text, id bigint, start integer, cancel boolean, state text, pipeline text,
    args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines;
    ends integer := coalesce(cardinality(p_end_ids), 0);
    beats integer := coalesce(cardinality(p_ids), 0);
    beaten bigint[];
    cancels boolean[];
    running integer;
    stale_ids bigint[];
    stale_starts integer[];
    stale_outputs bytea[];
    n integer;
BEGIN
    IF ends > 1024 THEN
        RAISE EXCEPTION 'a round ends at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    IF beats > 1024 OR coalesce(cardinality(p_starts), 0) > 1024
       OR coalesce(cardinality(p_pids), 0) > 1024 THEN
        RAISE EXCEPTION 'a beat names at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    IF coalesce(cardinality(p_end_starts), 0) <> ends OR coalesce(cardinality(p_end_states), 0) <> ends
       OR coalesce(cardinality(p_end_codes), 0) <> ends OR coalesce(cardinality(p_end_signals), 0) <> ends
       OR coalesce(cardinality(p_end_whys), 0) <> ends OR coalesce(cardinality(p_end_outputs), 0) <> ends
       OR coalesce(cardinality(p_end_bodies), 0) <> ends THEN
        RAISE EXCEPTION 'the ends'' arrays differ in length' USING ERRCODE = '22023';
    END IF;
    UPDATE orca.pool_machines pm SET seen_at = clock_timestamp(),
        busy_at = CASE WHEN ends > 0 OR beats > 0 THEN now() ELSE pm.busy_at END
    WHERE pm.role = session_user AND pm.ended_at IS NULL
    RETURNING pm.* INTO m;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live machine logs in as this role' USING ERRCODE = 'OR001';
    END IF;
    FOR i IN 1..ends LOOP
        kind := 'ended';
        id := p_end_ids[i];
        start := p_end_starts[i];
        cancel := NULL;
        state := orca.finish_attempt(p_end_ids[i], p_end_starts[i], p_end_states[i], p_end_codes[i],
            p_end_signals[i], p_end_whys[i], p_end_outputs[i], p_end_bodies[i], m.id);
        pipeline := NULL;
        args := NULL;
        spec := NULL;
        RETURN NEXT;
    END LOOP;
    -- The machine's running attempts, counted (under its row's lock: no
    -- claim adds to them meanwhile) for its room, and those it no longer
    -- beats queued again.
    SELECT count(*)::integer,
        array_agg(x.id) FILTER (WHERE NOT (x.id = ANY(p_ids)) AND x.heartbeat < now() - interval '15 seconds'),
        array_agg(x.start) FILTER (WHERE NOT (x.id = ANY(p_ids)) AND x.heartbeat < now() - interval '15 seconds'),
        array_agg(x.output) FILTER (WHERE NOT (x.id = ANY(p_ids)) AND x.heartbeat < now() - interval '15 seconds')
    INTO running, stale_ids, stale_starts, stale_outputs
    FROM orca.runs x
    WHERE x.machine = m.id AND x.state = 'running' COLLATE "C";
    FOR i IN 1..coalesce(cardinality(stale_ids), 0) LOOP
        -- Requeued, or no longer running: either way not running here.
        PERFORM orca.requeue_attempt(stale_ids[i], stale_starts[i],
            format('the worker on machine %s was not running it', m.name), stale_outputs[i]);
        running := running - 1;
    END LOOP;
    IF beats > 0 THEN
        WITH b AS (
            UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = x.pid
            FROM unnest(p_ids, p_starts, p_pids) AS x(id, start, pid)
            WHERE r.id = x.id AND r.start = x.start AND r.state = 'running' COLLATE "C"
              AND r.machine = m.id
            RETURNING r.id, r.cancel
        )
        SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
        INTO beaten, cancels FROM b;
        PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
        RETURN QUERY SELECT 'beaten', b.id, NULL::integer, b.cancel, NULL::text, NULL::text,
            NULL::text[], NULL::jsonb
        FROM unnest(beaten, cancels) AS b(id, cancel);
    END IF;
    IF p_room > 0 AND m.ending IS NULL THEN
        RETURN QUERY SELECT 'claimed', c.id, c.start, false, 'running', c.pipeline, c.args, c.spec
        FROM orca.claim_runs(m, p_room, running) c;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 AND ends = 0 AND beats = 0 THEN
            UPDATE orca.pool_machines SET busy_at = now() WHERE pool_machines.id = m.id;
        END IF;
    END IF;
END
$$;

-- (Migration 13's orca.claim_runs(m, room, boolean) stays, unused: a round
-- of migration 13's under way as this migration commits still calls it.
-- A later migration drops it.)
REVOKE ALL ON FUNCTION orca.claim_runs(orca.pool_machines, integer, integer) FROM PUBLIC;
