-- Migration 16: a worker's round sets up less (issue 14's claims a
-- second).
--
-- A cached plan keeps the plan, not its executor state: each execution of
-- a statement sets up every node and expression in it anew, and a plpgsql
-- expression (an IF, an assignment) is set up once a transaction, so once
-- a round. That set-up, not the rows read or written, was most of a round
-- (ExecutorStart alone 28 %), and folding the same work into fewer
-- statements does not shrink it (the whole round as two statements: 1.97 M
-- instructions against 1.90 M). What a round sets up on its common path
-- is cut instead:
--
-- * orca.worker_round calls no function of orca's on its common path. It
--   ends its attempts itself, as orca.finish_attempt does
--   (tests/it/worker.rs has the three ways of ending agree case by case),
--   and an end that succeeded or was cancelled, most of them, is a
--   statement that reads no pipeline and sets no retry; a failure's retry
--   event and alert are statements of their own, made only when it has
--   them. It takes its first turn itself too, without orca.claim_runs's
--   cursor: a turn is one UPDATE of orca.claim_locks, whose pick is the
--   pool's pipelines sorted in a
--   subquery with the probe and the claim lock as conditions above it and
--   LIMIT 1 (a condition with a subquery is never pushed below the sort,
--   so those after the first that passes are not probed), and the claim of
--   its runs a second statement, whose snapshot is taken after the lock,
--   as before. (The lock is one CASE with the probe: the planner orders a
--   filter's conditions by their cost, and a claim lock must not be taken
--   on a pipeline with nothing due.) Room left after that turn (a machine
--   with several slots, a turn at its max_runs) is claimed as before, by
--   orca.claim_runs's loop over the other pipelines in turn (a turn
--   statement for each, each sorting the pool again, cost seconds a round
--   with a few hundred pipelines at max_runs). The picks need no
--   sort: non-fill runs, then fill runs, is the order their Append returns
--   them in; the claimed rows come in no set order (the worker starts
--   each).
-- * The machine's running attempts are counted with those silent for 15 s
--   that it does not beat, which are read again only when there are some;
--   each end's state is checked as the loop reads it (one IN, not a scan
--   of the array first). An end names its machine's attempt in a
--   condition the machine's index can't serve (IS NOT DISTINCT FROM), so
--   that it is read by its id, not among all its machine's running ones.
-- * orca.runs' state CHECK was parsed again by every UPDATE (its array
--   constant read byte by byte): it is now a cast to the enum
--   orca.run_state, a tiny expression (a bad state is refused with 22P02
--   instead of 23514; NOT VALID: every row passed the check it replaces).
--   The fold trigger's WHEN is a single column; its function checks the
--   state.
-- * A round updates its turn's row of orca.claim_locks and its machine's
--   row: with the default fillfactor a page fills with a few hundred dead
--   versions before it is pruned, and every seq scan and lookup steps over
--   them. fillfactor 10 (orca.claim_locks, a row a pipeline) and 50
--   (orca.pool_machines) have a page pruned as it is read once a tenth
--   (half) of it is used.
--
-- orca.worker_claim (older binaries') keeps orca.claim_runs, whose idle
-- claim takes no lock: a round always locks its machine's row, to mark it
-- seen.
--
-- Measured as migration 15 was (bench/pools.rs's claims database, one
-- session under valgrind, a round that ends a run and claims the next):
-- 1.90 M instructions a round before, 1.50 M after (21 % fewer).

CREATE TYPE orca.run_state AS ENUM ('queued', 'running', 'succeeded', 'failed', 'cancelled');
ALTER TABLE orca.runs DROP CONSTRAINT runs_state_check,
    ADD CONSTRAINT runs_state_check CHECK (state::orca.run_state IS NOT NULL) NOT VALID;

ALTER TABLE orca.claim_locks SET (fillfactor = 10);
ALTER TABLE orca.pool_machines SET (fillfactor = 50);

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
    ends integer := coalesce(cardinality(p_end_ids), 0);
    beats integer := coalesce(cardinality(p_ids), 0);
    m orca.pool_machines;
    running integer;
    beaten bigint[];
    cancels boolean[];
    ended text;
    ended_pipeline text;
    ended_why text;
    ended_url text;
    ended_failures integer;
    ended_tries integer;
    ended_delay float8;
    turn text;
    turn_max integer;
    turn_spec jsonb;
    taken integer;
    n integer;
BEGIN
    IF ends > 1024 THEN
        RAISE EXCEPTION 'a round ends at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    IF beats > 1024 OR cardinality(p_starts) > 1024 OR cardinality(p_pids) > 1024 THEN
        RAISE EXCEPTION 'a beat names at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    -- (Each end's state is checked as the loop reads it.)
    IF NOT ends = ALL (ARRAY[coalesce(cardinality(p_end_starts), 0), coalesce(cardinality(p_end_states), 0),
                             coalesce(cardinality(p_end_codes), 0), coalesce(cardinality(p_end_signals), 0),
                             coalesce(cardinality(p_end_whys), 0), coalesce(cardinality(p_end_outputs), 0),
                             coalesce(cardinality(p_end_bodies), 0)]) THEN
        RAISE EXCEPTION 'the ends'' arrays differ in length' USING ERRCODE = '22023';
    END IF;
    UPDATE orca.pool_machines pm SET seen_at = clock_timestamp(),
        busy_at = CASE WHEN ends > 0 OR beats > 0 THEN now() ELSE pm.busy_at END
    WHERE pm.role = session_user AND pm.ended_at IS NULL
    RETURNING pm.* INTO m;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live machine logs in as this role' USING ERRCODE = 'OR001';
    END IF;
    -- Its ends, each as orca.finish_attempt (migration 14) with this
    -- machine, which it no longer calls (tests/it/worker.rs: the two and
    -- orca.finish_attempts agree case by case); a row per end, with the
    -- run's state now (NULL: not a running attempt of this machine's, or
    -- named twice). A failure is a statement of its own: most ends
    -- succeed, and theirs reads no pipeline and sets no retry.
    FOR i IN 1..ends LOOP
        IF p_end_states[i] = 'failed' THEN
            -- A failure: queued again after its retry delay while retries
            -- are left (unless a cancel was asked for), else its alert.
            WITH u AS (
                UPDATE orca.runs x SET
                    state = CASE WHEN NOT x.cancel AND x.failures < coalesce((p.spec ->> 'retries')::integer, 0)
                                 THEN 'queued' ELSE 'failed' END,
                    failures = x.failures + 1,
                    not_before = CASE WHEN NOT x.cancel AND x.failures < coalesce((p.spec ->> 'retries')::integer, 0)
                                      THEN now() + make_interval(secs => coalesce((p.spec ->> 'retry_delay')::float8, 0))
                                      ELSE x.not_before END,
                    ended_at = now(), heartbeat = NULL,
                    exit_code = p_end_codes[i], exit_signal = p_end_signals[i],
                    why = orca.bounded_why(p_end_whys[i]), output = orca.bounded_output(p_end_outputs[i])
                FROM orca.pipelines p
                WHERE p.name = x.pipeline
                  AND x.id = p_end_ids[i] AND x.start = p_end_starts[i] AND x.state = 'running' COLLATE "C"
                  AND x.machine IS NOT DISTINCT FROM m.id
                RETURNING x.id, x.pipeline, x.state, x.failures, x.why,
                    coalesce((p.spec ->> 'retries')::integer, 0) AS tries,
                    coalesce((p.spec ->> 'retry_delay')::float8, 0) AS delay, p.spec ->> 'alert' AS url
            ), e AS (
                INSERT INTO orca.events (run, pipeline, kind, why)
                SELECT u.id, u.pipeline, 'failed', u.why FROM u
            )
            SELECT u.state, u.pipeline, u.why, u.url, u.failures, u.tries, u.delay
            INTO ended, ended_pipeline, ended_why, ended_url, ended_failures, ended_tries, ended_delay FROM u;
            IF ended = 'queued' THEN
                INSERT INTO orca.events (run, pipeline, kind, why) VALUES (p_end_ids[i], ended_pipeline, 'retried',
                    format('retry %s of %s in %ss', ended_failures, ended_tries, ended_delay));
            ELSIF ended = 'failed' AND ended_url IS NOT NULL THEN
                INSERT INTO orca.alerts (run, pipeline, url, body) VALUES (p_end_ids[i], ended_pipeline, ended_url,
                    jsonb_build_object('pipeline', ended_pipeline, 'run', p_end_ids[i], 'start', p_end_starts[i],
                        'state', 'failed', 'exit_code', p_end_codes[i], 'exit_signal', p_end_signals[i],
                        'why', ended_why,
                        'output', CASE WHEN jsonb_typeof(p_end_bodies[i] -> 'output') = 'string'
                                       THEN right(p_end_bodies[i] ->> 'output', 4096) ELSE '' END));
            END IF;
        ELSIF p_end_states[i] IN ('succeeded', 'cancelled') THEN
            -- Succeeded or cancelled: its state, its event.
            WITH u AS (
                UPDATE orca.runs x SET state = p_end_states[i], ended_at = now(), heartbeat = NULL,
                    exit_code = p_end_codes[i], exit_signal = p_end_signals[i],
                    why = orca.bounded_why(p_end_whys[i]), output = orca.bounded_output(p_end_outputs[i])
                WHERE x.id = p_end_ids[i] AND x.start = p_end_starts[i] AND x.state = 'running' COLLATE "C"
                  AND x.machine IS NOT DISTINCT FROM m.id
                RETURNING x.id, x.pipeline, x.state, x.why
            ), e AS (
                INSERT INTO orca.events (run, pipeline, kind, why)
                SELECT u.id, u.pipeline, u.state, u.why FROM u
            )
            SELECT u.state INTO ended FROM u;
        ELSE
            -- (As orca.finish_attempt's check: the whole round refused. Each
            -- end's own, read as the loop reads it: an array whose
            -- subscripts don't start at 1 has NULLs here.)
            RAISE EXCEPTION 'bad state %', left(coalesce(p_end_states[i], 'NULL'), 40)
                USING ERRCODE = '22023';
        END IF;
        -- (cancel, pipeline, args and spec are NULL: nothing else sets them.)
        kind := 'ended';
        id := p_end_ids[i];
        start := p_end_starts[i];
        state := ended;
        RETURN NEXT;
    END LOOP;
    -- The machine's running attempts, counted (under its row's lock: no
    -- claim adds to them meanwhile) for its room, and those it no longer
    -- beats queued again.
    SELECT count(*)::integer,
        count(*) FILTER (WHERE NOT (x.id = ANY (p_ids)) AND x.heartbeat < now() - interval '15 seconds')::integer
    INTO running, n
    FROM orca.runs x
    WHERE x.machine = m.id AND x.state = 'running' COLLATE "C";
    IF n > 0 THEN
        -- Requeued, or no longer running: either way not running here.
        SELECT count(orca.requeue_attempt(x.id, x.start,
                   format('the worker on machine %s was not running it', m.name), x.output))::integer
        INTO n
        FROM orca.runs x
        WHERE x.machine = m.id AND x.state = 'running' COLLATE "C"
          AND NOT (x.id = ANY (p_ids)) AND x.heartbeat < now() - interval '15 seconds';
        running := running - n;
    END IF;
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
    IF coalesce(p_room, 0) <= 0 OR m.ending IS NOT NULL THEN
        RETURN;
    END IF;
    p_room := least(p_room, m.slots - running);
    -- The pool's pipeline whose turn it is (the one that took its turn
    -- longest ago, or never, first) of those with a run queued and due and
    -- whose claim lock no other worker holds: its claim lock and its turn
    -- taken, whatever it then takes. (The probe in the order of
    -- runs_queued_order, so that it is read from its start; the lock only
    -- once the probe found a run: the planner orders a filter's conditions
    -- by their cost, so the two are one CASE.)
    UPDATE orca.claim_locks l SET claimed_at = clock_timestamp()
    FROM orca.pipelines p
    WHERE l.pipeline = (
            SELECT t.name FROM (
                SELECT q.name FROM orca.pipelines q
                JOIN orca.claim_locks k ON k.pipeline = q.name
                WHERE q.placement = 'worker:' || m.pool AND NOT q.paused AND NOT q.retired
                ORDER BY k.claimed_at NULLS FIRST, q.name) t
            WHERE CASE WHEN (SELECT r.id FROM orca.runs r
                             WHERE r.pipeline = t.name AND r.state = 'queued' AND r.not_before <= now()
                             ORDER BY r.fill, r.queued_at, r.id LIMIT 1) IS NOT NULL
                       THEN EXISTS (SELECT 1 FROM orca.claim_locks k WHERE k.pipeline = t.name
                                    FOR UPDATE SKIP LOCKED)
                       ELSE false END
            LIMIT 1)
      AND p.name = l.pipeline
    RETURNING l.pipeline, p.max_runs, p.spec INTO turn, turn_max, turn_spec;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Within max_runs (less its running attempts but fill runs), then fill
    -- runs on top, up to the room (the picks in that order: an Append runs
    -- its inputs in turn, so no sort is needed): the ids the picks found
    -- are claimed (the UPDATE's own check skips one a cancel took
    -- meanwhile) and their events written, in one statement, whose
    -- snapshot was taken after the claim lock (so that its count sees every
    -- claim made under it). The claimed rows come in no set order.
    RETURN QUERY
    WITH u AS (
        UPDATE orca.runs r SET state = 'running', start = r.start + 1, started_at = now(),
            ended_at = NULL, heartbeat = now(), host = m.name, pid = NULL, instance = NULL,
            machine = m.id, cancel = false, exit_code = NULL, exit_signal = NULL, why = NULL,
            output = ''::bytea
        WHERE r.id = ANY (ARRAY(
            SELECT k.id FROM (
                (SELECT q.id FROM orca.runs q
                 WHERE q.pipeline = turn AND q.state = 'queued' AND NOT q.fill
                   AND q.not_before <= now()
                 ORDER BY q.queued_at, q.id
                 LIMIT greatest(least(turn_max - (SELECT count(*) FROM orca.runs b
                                                  WHERE b.pipeline = turn
                                                    AND b.state = 'running' AND NOT b.fill),
                                      p_room), 0))
                UNION ALL
                (SELECT q.id FROM orca.runs q
                 WHERE q.pipeline = turn AND q.state = 'queued' AND q.fill
                   AND q.not_before <= now()
                 ORDER BY q.queued_at, q.id
                 LIMIT p_room)
            ) k
            LIMIT p_room))
          AND r.state = 'queued' COLLATE "C"
        RETURNING r.id, r.start, r.pipeline, r.args
    ), e AS (
        INSERT INTO orca.events (run, pipeline, kind, why)
        SELECT u.id, u.pipeline, 'started', format('attempt %s on machine %s', u.start, m.name)
        FROM u
    )
    SELECT 'claimed'::text, u.id, u.start, false, 'running'::text, u.pipeline, u.args, turn_spec
    FROM u;
    GET DIAGNOSTICS taken = ROW_COUNT;
    IF taken < p_room THEN
        -- Room left (a machine with several slots, a pipeline at its
        -- max_runs or short of runs): the other pipelines in turn, as
        -- migration 15's claim did (this turn's pipeline is last now).
        RETURN QUERY SELECT 'claimed', c.id, c.start, false, 'running', c.pipeline, c.args, c.spec
        FROM orca.claim_runs(m, p_room - taken, running + taken) c;
        GET DIAGNOSTICS n = ROW_COUNT;
        taken := taken + n;
    END IF;
    IF taken > 0 AND ends = 0 AND beats = 0 THEN
        UPDATE orca.pool_machines SET busy_at = now() WHERE pool_machines.id = m.id;
    END IF;
END
$$;

-- As migration 15's, the trigger's WHEN a single column: it is parsed and
-- set up by every UPDATE of a run's state or start (claims and ends), and
-- the state is checked in the function instead, which runs only for an
-- attempt with chunks.
CREATE OR REPLACE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state OPERATOR(pg_catalog.=) 'running'::pg_catalog.text
       AND (NEW.state OPERATOR(pg_catalog.<>) 'running'::pg_catalog.text
            OR NEW.start OPERATOR(pg_catalog.<>) OLD.start) THEN
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
    WHEN (OLD.chunked) EXECUTE FUNCTION orca.output_fold();
