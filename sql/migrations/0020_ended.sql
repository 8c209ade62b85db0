-- Migration 20: ENDED is when the attempt's process ended, by the
-- supervisor's clock (issue 27 §2).
--
-- runs.ended_at (and so orca.attempts.ended_at, which migration 19's
-- trigger copies from it) was the database's now() when the end was
-- written: a tick or a worker's round after the process ended, and a whole
-- outage later for an end kept while Postgres was away, while the duration
-- in its why ("after 0.3s") is the supervisor's measurement. Now the
-- supervisor, which keeps the moment it saw each process end (its
-- monotonic clock), sends with each end how many seconds ago that was, and
-- ended_at is now() less that: the database's clock stays the reference
-- (no host's clock is compared with it), and STARTED..ENDED agrees with the
-- measured duration.
--
-- The "ago" comes from a supervisor, which for a pool is a machine login:
-- orca.ended_when keeps ended_at within [started_at, now()] whatever it
-- sends (negative, NULL, NaN, infinite or huge: NULL or not positive is
-- now(), anything else at most back to the attempt's start). An end with no
-- process measured (the sweep of a stale run, a lost machine, a cancel of a
-- queued run, an old binary's end) is still now().
--
-- New functions, each with one argument more than the one it follows (an
-- argument can't be added in place): orca.finish_attempt (10 arguments),
-- orca.finish_attempts (10), orca.worker_round (17), orca.worker_finish
-- (9), orca.instance_head_finish (9). The old ones stay as they are, for
-- an older scheduler or worker still running during a deploy; the new ones
-- have the same bodies but for ended_at (and the ago arrays' length
-- checked with the others), the same EXECUTE grants and the same settings
-- as the old ones, but orca.finish_attempt's: the scheduler now calls it
-- itself, in place of the 8-argument wrapper that set search_path and
-- plan_cache_mode for it, so it sets them itself, as migration 14's did.
-- (No 9-argument orca.finish_attempt with the ago in place of the
-- machine: migration 10's 8-argument wrapper passes an untyped NULL as
-- the 9th, which would then resolve to the float8 one, not the machine.)

-- When an attempt that started at p_started ended, its process having
-- ended p_ago seconds ago by its supervisor's clock: now() less p_ago,
-- within [p_started, now()]; now() for no ago (NULL, zero, negative). (A
-- plain SQL expression, inlined where it is used; every operator named
-- with its schema, so a caller's search_path can't stand in for one.)
CREATE FUNCTION orca.ended_when(p_started timestamptz, p_ago float8) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_ago OPERATOR(pg_catalog.>) 0::float8
                THEN LEAST(pg_catalog.now(), GREATEST(p_started,
                         pg_catalog.now() OPERATOR(pg_catalog.-)
                         pg_catalog.make_interval(secs => LEAST(p_ago, 31536000::float8))))
                ELSE pg_catalog.now() END
$$;
REVOKE ALL ON FUNCTION orca.ended_when(timestamptz, float8) FROM PUBLIC;

-- As migration 14's (9 arguments), with p_ago. Its settings as migration
-- 14 had them: it is called by a statement of the scheduler's
-- (sql/run_finish.sql), not only by orca's functions.
CREATE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_machine bigint, p_ago float8
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
            ended_at = orca.ended_when(x.started_at, p_ago), heartbeat = NULL,
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

-- As migration 15's, with p_agos (one an end, as each other array).
CREATE FUNCTION orca.finish_attempts(
    p_ids bigint[], p_starts integer[], p_states text[], p_codes integer[], p_signals integer[],
    p_whys text[], p_outputs bytea[], p_bodies jsonb[], p_machine bigint, p_agos float8[]
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
                             coalesce(cardinality(p_bodies), 0), coalesce(cardinality(p_agos), 0)]) THEN
        RAISE EXCEPTION 'the ends'' arrays differ in length' USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(s, 'NULL') INTO bad FROM unnest(p_states) AS s
    WHERE s IS NULL OR s NOT IN ('succeeded', 'failed', 'cancelled') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'bad state %', left(bad, 40) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH e AS (
        SELECT DISTINCT ON (x.id, x.start) x.n, x.id, x.start, x.state, x.code, x.signal, x.ago,
               orca.bounded_why(x.why) AS why, orca.bounded_output(x.output) AS output, x.body
        FROM unnest(p_ids, p_starts, p_states, p_codes, p_signals, p_whys, p_outputs, p_bodies, p_agos)
             WITH ORDINALITY AS x(id, start, state, code, signal, why, output, body, ago, n)
        ORDER BY x.id, x.start, x.n
    ), u AS (
        UPDATE orca.runs r SET
            state = CASE WHEN e.state = 'failed' AND r.failures < s.tries AND NOT r.cancel
                         THEN 'queued' ELSE e.state END,
            failures = r.failures + CASE WHEN e.state = 'failed' THEN 1 ELSE 0 END,
            not_before = CASE WHEN e.state = 'failed' AND r.failures < s.tries AND NOT r.cancel
                              THEN now() + make_interval(secs => s.delay) ELSE r.not_before END,
            ended_at = orca.ended_when(r.started_at, e.ago), heartbeat = NULL,
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

-- As migration 17's, with p_end_agos (one an end, as each other end's array).
CREATE FUNCTION orca.worker_round(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[],
    p_room integer,
    p_end_ids bigint[], p_end_starts integer[], p_end_states text[], p_end_codes integer[],
    p_end_signals integer[], p_end_whys text[], p_end_outputs bytea[], p_end_bodies jsonb[],
    p_end_agos float8[])
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
                             coalesce(cardinality(p_end_bodies), 0), coalesce(cardinality(p_end_agos), 0)]) THEN
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
                    ended_at = orca.ended_when(x.started_at, p_end_agos[i]), heartbeat = NULL,
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
                UPDATE orca.runs x SET state = p_end_states[i],
                    ended_at = orca.ended_when(x.started_at, p_end_agos[i]), heartbeat = NULL,
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
                 LIMIT greatest(least(coalesce((turn_spec ->> 'max_fills')::integer, 10)
                                      - (SELECT count(*) FROM orca.runs b
                                         WHERE b.pipeline = turn
                                           AND b.state = 'running' AND b.fill),
                                      p_room), 0))
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

-- As migration 10's orca.worker_finish, with p_ago.
CREATE FUNCTION orca.worker_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_ago float8
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body,
                               (orca.worker_machine()).id, p_ago);
END
$$;

-- As migration 4's orca.instance_head_finish, with p_ago.
CREATE FUNCTION orca.instance_head_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb, p_ago float8
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'cancelled') OR NOT orca.instance_heads(p_id, p_start) THEN
        RETURN NULL;
    END IF;
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body,
                               NULL, p_ago);
END
$$;

-- Who may call them: as the functions they follow (migrations 4, 10, 13).
REVOKE ALL ON FUNCTION
    orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb, bigint, float8),
    orca.finish_attempts(bigint[], integer[], text[], integer[], integer[], text[], bytea[], jsonb[], bigint,
        float8[]),
    orca.worker_finish(bigint, integer, text, integer, integer, text, bytea, jsonb, float8),
    orca.worker_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[], integer,
        bigint[], integer[], text[], integer[], integer[], text[], bytea[], jsonb[], float8[]),
    orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb, float8)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    orca.worker_finish(bigint, integer, text, integer, integer, text, bytea, jsonb, float8),
    orca.worker_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[], integer,
        bigint[], integer[], text[], integer[], integer[], text[], bytea[], jsonb[], float8[])
    TO orca_worker;
GRANT EXECUTE ON FUNCTION
    orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb, float8)
    TO orca_instance;
