-- Migration 15: an end that streamed nothing costs no fold, and the
-- functions a round calls have no settings of their own (issue 14's claims
-- a second).
--
-- * The fold trigger (orca.output_fold: an attempt's chunks folded into
--   runs.output and deleted as it stops running) was called by every end
--   (every UPDATE of a running run's state or start), and looked for
--   chunks each time. Most attempts end before their first append.
--   runs.chunked now says the attempt has chunks: orca.output_put sets it
--   with the attempt's first chunk (under the row lock its beat took), the
--   fold clears it, and the trigger fires only WHEN it is set, so the end
--   of an attempt that streamed nothing calls no function. Running
--   attempts that have chunks as this migration commits are marked here,
--   under the lock ADD COLUMN takes: every transaction that wrote chunks
--   (each beat updates its runs first) has ended by then, and the marking
--   sees what they committed (orca migrate runs at READ COMMITTED).
-- * orca.finish_attempt (9 arguments) and orca.claim_runs (3 arguments)
--   set their search_path and plan_cache_mode, and set them back, on each
--   call, about a statement's cost each. Their only callers, orca's own
--   functions, all set search_path = pg_catalog, pg_temp already; those
--   that did not set plan_cache_mode = force_generic_plan now do, so the
--   two run as before under their callers' settings. (EXECUTE on them is
--   orca's role's alone: nothing else calls them.)
--
-- * A claim went through the pool's pipelines in turn, one statement or
--   two each, until one had a run due: a pipeline with nothing queued
--   takes no turn, so it stays ahead, and each claim paid for every idle
--   one ahead of the first with work (forty idle pipelines in a pool: 49
--   statements a claim). The loop's own query now leaves out the
--   pipelines with nothing due (a probe each, in that one query, fetched
--   a row at a time so that none after the first with work is probed):
--   9 statements. A round's claim lock no longer probes again: the loop
--   found a run due (one another worker claimed since, a few milliseconds
--   ago at most, costs a turn and a claim of nothing); orca.worker_claim's,
--   which waits for its machine's row lock first, probes again after it.
-- * orca.finish_attempts (a supervisor's ends) refuses arrays of
--   different lengths, as orca.worker_round does, instead of padding the
--   shorter with NULLs.
--
-- Measured as migration 14 was (bench/pools.rs's claims database, one
-- session under valgrind, a round that ends a run and claims the next):
-- 1.90 M instructions a round before, 1.78 M after (6 % fewer).
--
-- (Migration 13's orca.claim_runs(m, room, boolean) stays: a database that
-- gets 14 and this one in one transaction still has migration 13's rounds
-- under way as it commits.)

ALTER TABLE orca.runs ADD COLUMN chunked boolean NOT NULL DEFAULT false;
UPDATE orca.runs r SET chunked = true
WHERE r.state = 'running' COLLATE "C"
  AND EXISTS (SELECT 1 FROM orca.output_chunks c WHERE c.run = r.id AND c.start = r.start);

-- As migration 14's, clearing runs.chunked as it folds.
CREATE OR REPLACE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state OPERATOR(pg_catalog.<>) 'running'::pg_catalog.text
       OR NEW.start OPERATOR(pg_catalog.<>) OLD.start THEN
        IF EXISTS (SELECT 1 FROM orca.output_chunks c
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
        NEW.chunked := false;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER runs_output_fold ON orca.runs;
CREATE TRIGGER runs_output_fold BEFORE UPDATE OF state, start ON orca.runs FOR EACH ROW
    WHEN (OLD.chunked AND OLD.state = 'running') EXECUTE FUNCTION orca.output_fold();

-- As migration 8's, marking the attempt chunked with its first chunk.
CREATE OR REPLACE FUNCTION orca.output_put(p_id bigint, p_start integer, p_at bigint, p_bytes bytea)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_upto bigint;
    v_stored bigint;
BEGIN
    IF p_at IS NULL OR p_at < 0 OR coalesce(octet_length(p_bytes), 0) = 0 THEN
        RETURN;
    END IF;
    v_upto := p_at + octet_length(p_bytes);
    IF octet_length(p_bytes) > 65536 THEN
        p_bytes := orca.bounded_output(p_bytes);
        p_at := v_upto - 65536;
    END IF;
    SELECT max(c.upto) INTO v_stored FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start;
    IF v_stored >= v_upto THEN
        RETURN;
    ELSIF v_stored > p_at THEN
        p_bytes := substring(p_bytes FROM (v_stored - p_at + 1)::integer);
        p_at := v_stored;
    END IF;
    INSERT INTO orca.output_chunks (run, start, at, upto, bytes)
    VALUES (p_id, p_start, p_at, v_upto, p_bytes);
    DELETE FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start AND c.upto <= v_upto - 65536;
    -- Its first chunk (a chunk stays until the fold: the one just stored
    -- ends past the cut): its end folds them (the trigger's WHEN).
    IF v_stored IS NULL THEN
        UPDATE orca.runs r SET chunked = true
        WHERE r.id = p_id AND r.start = p_start AND NOT r.chunked;
    END IF;
END
$$;

-- As migration 11's, refusing arrays of different lengths, as
-- orca.worker_round does.
CREATE OR REPLACE FUNCTION orca.finish_attempts(
    p_ids bigint[], p_starts integer[], p_states text[], p_codes integer[], p_signals integer[],
    p_whys text[], p_outputs bytea[], p_bodies jsonb[], p_machine bigint
) RETURNS TABLE (id bigint, state text) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    bad text;
    ends integer := coalesce(cardinality(p_ids), 0);
BEGIN
    IF ends > 1024 THEN
        RAISE EXCEPTION 'at most 1024 ends at once' USING ERRCODE = '54000';
    END IF;
    -- One of each per end: unnest would pad a shorter array with NULLs
    -- (an end with no exit code, say) instead of refusing.
    IF NOT ends = ALL (ARRAY[coalesce(cardinality(p_starts), 0), coalesce(cardinality(p_states), 0),
                             coalesce(cardinality(p_codes), 0), coalesce(cardinality(p_signals), 0),
                             coalesce(cardinality(p_whys), 0), coalesce(cardinality(p_outputs), 0),
                             coalesce(cardinality(p_bodies), 0)]) THEN
        RAISE EXCEPTION 'the ends'' arrays differ in length' USING ERRCODE = '22023';
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
        WHERE r.id = e.id AND r.start = e.start AND r.state = 'running' COLLATE "C"
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


-- As migration 14's, with only the pool's pipelines that have a run due
-- in its loop.
CREATE OR REPLACE FUNCTION orca.claim_runs(m orca.pool_machines, p_room integer, p_running integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    turns CURSOR FOR
        SELECT t.name, t.max_runs, t.spec FROM (
            SELECT p.name, p.max_runs, p.spec, l.claimed_at FROM orca.pipelines p
            JOIN orca.claim_locks l ON l.pipeline = p.name
            WHERE p.placement = 'worker:' || m.pool AND NOT p.paused AND NOT p.retired
            ORDER BY l.claimed_at NULLS FIRST, p.name) t
        CROSS JOIN LATERAL (
            SELECT r.id FROM orca.runs r
            WHERE r.pipeline = t.name AND r.state = 'queued' AND r.not_before <= now()
            ORDER BY r.fill, r.queued_at, r.id LIMIT 1) due
        ORDER BY t.claimed_at NULLS FIRST, t.name;
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
    -- The pool's pipelines in turn (the one that took its turn longest ago,
    -- or never, first), those with nothing queued and due left out, one at
    -- a time (a cursor's loop fetches a row at a time): a pipeline with
    -- nothing due, which takes no turn and so stays ahead, costs this
    -- query a probe, not statements of its own, and those after the first
    -- with work are not probed. (The probe in the order of
    -- runs_queued_order, so that it is read from its start; the subquery's
    -- ORDER BY keeps it a subquery, sorted below the probes, which follow
    -- its order: the outer ORDER BY costs no sort.)
    FOR c IN turns
    LOOP
        IF NOT locked THEN
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
            -- Still due after the wait for that lock (another worker may
            -- have claimed it meanwhile): else no claim lock, no turn.
            PERFORM 1 FROM orca.runs r
            WHERE r.pipeline = c.name AND r.state = 'queued' AND r.not_before <= now()
            ORDER BY r.fill, r.queued_at, r.id LIMIT 1;
            CONTINUE WHEN NOT FOUND;
        END IF;
        -- Another worker claiming this pipeline's runs right now: leave it
        -- to that one (this worker tries again on its next round).
        -- Otherwise its lock is taken and so is its turn, whatever this
        -- claim takes of it (it had a run due as the loop found it; one
        -- another worker claimed since, on a round, costs a turn and a
        -- claim of nothing).
        UPDATE orca.claim_locks l SET claimed_at = clock_timestamp()
        WHERE l.pipeline = (
            SELECT k.pipeline FROM orca.claim_locks k
            WHERE k.pipeline = c.name
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
        -- (Left before the next fetch: the next pipeline is not probed.)
        EXIT WHEN taken >= p_room;
    END LOOP;
END
$$;

ALTER FUNCTION orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb, bigint)
    RESET ALL;
ALTER FUNCTION orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION orca.worker_finish(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION orca.worker_claim(integer) SET plan_cache_mode = force_generic_plan;
