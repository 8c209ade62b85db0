-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer), made by migration 8.
-- A binary of migration 12 or before: its round, now the same round
-- without ends.
CREATE OR REPLACE FUNCTION orca.worker_round(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[],
    p_room integer)
RETURNS TABLE (id bigint, start integer, cancel boolean, claimed boolean, pipeline text,
    args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT r.id, r.start, r.cancel, r.kind = 'claimed', r.pipeline, r.args, r.spec
    FROM orca.worker_round(p_ids, p_starts, p_pids, p_out_ids, p_out_starts, p_out_at, p_out_bytes,
        p_room, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}') r;
END
$$;
REVOKE ALL ON FUNCTION orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer) TO orca_worker;

-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]), made by migration 13.
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
    IF coalesce(p_room, 0) <= 0 OR m.ending IS NOT NULL OR m.notice IS NOT NULL THEN
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
REVOKE ALL ON FUNCTION orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]) TO orca_worker;

-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],double precision[]), made by migration 20.
-- As migration 17's, with p_end_agos (one an end, as each other end's array).
CREATE OR REPLACE FUNCTION orca.worker_round(p_ids bigint[], p_starts integer[], p_pids integer[],
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
    IF coalesce(p_room, 0) <= 0 OR m.ending IS NOT NULL OR m.notice IS NOT NULL THEN
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
REVOKE ALL ON FUNCTION orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],double precision[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],double precision[]) TO orca_worker;
