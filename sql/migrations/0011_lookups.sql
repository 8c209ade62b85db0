-- Migration 11: a claim, a beat and an end look their runs up by key
-- whatever the table's statistics say (issue 14's fleet on one Postgres),
-- the same behaviour.
--
-- orca.runs has partial indexes on state = 'queued' (runs_queued_order,
-- runs_queued_fill, runs_sensor_queued) and on state = 'running'
-- (runs_running, runs_machine_running, runs_instance_running). A lookup by
-- id that also says state = 'queued' (or 'running') may read one of them
-- whole instead of the primary key, and the planner chooses that when the
-- statistics say few runs wait (or run): after a burst queued since the
-- last ANALYZE, every claim read the index entries of every queued run
-- (about 1,850 buffers a claim with 100,000 queued, against 50:
-- tests/it/plans.rs), and a plan so chosen is kept for the session.
--
-- Here each such lookup compares state under COLLATE "C": the same test
-- (text equality is bytewise under any deterministic collation, and a
-- state is one of five ASCII words), which the planner can't match to a
-- partial index's predicate (that compares under the column's collation),
-- so it takes the primary key. The functions are otherwise as they were:
-- orca.worker_claim's claiming UPDATE (its picks still read
-- runs_queued_order), orca.finish_attempt, orca.finish_attempts,
-- orca.runs_beat, orca.outputs_put, orca.worker_beat (its requeue of lost
-- attempts still reads runs_machine_running) and orca.instance_head_beat.
-- sql/runs_start.sql, sql/run_cancel.sql and sql/instances_to_end.sql do
-- the same.

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
    IF taken > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp() WHERE pool_machines.id = m.id;
    END IF;
END
$$;


CREATE OR REPLACE FUNCTION orca.finish_attempt(
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
    WHERE x.id = p_id AND x.start = p_start AND x.state = 'running' COLLATE "C"
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
        WHERE id = p_id AND start = p_start AND state = 'running' COLLATE "C"
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


CREATE OR REPLACE FUNCTION orca.finish_attempts(
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


CREATE OR REPLACE FUNCTION orca.runs_beat(p_ids bigint[], p_starts integer[], p_pids integer[],
    p_out_ids bigint[], p_out_starts integer[], p_out_at bigint[], p_out_bytes bytea[])
RETURNS TABLE (id bigint, cancel boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    beaten bigint[];
    cancels boolean[];
BEGIN
    WITH b AS (
        UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = x.pid
        FROM unnest(p_ids, p_starts, p_pids) AS x(id, start, pid)
        WHERE r.id = x.id AND r.start = x.start AND r.state = 'running' COLLATE "C"
        RETURNING r.id, r.cancel
    )
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(b.cancel), '{}')
    INTO beaten, cancels FROM b;
    PERFORM orca.outputs_put(beaten, p_out_ids, p_out_starts, p_out_at, p_out_bytes);
    RETURN QUERY SELECT b.id, b.cancel FROM unnest(beaten, cancels) AS b(id, cancel);
END
$$;


CREATE OR REPLACE FUNCTION orca.outputs_put(p_beaten bigint[], p_ids bigint[], p_starts integer[],
    p_at bigint[], p_bytes bytea[])
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) > 1024 OR coalesce(cardinality(p_starts), 0) > 1024
       OR coalesce(cardinality(p_at), 0) > 1024 OR coalesce(cardinality(p_bytes), 0) > 1024 THEN
        RAISE EXCEPTION 'a beat appends to at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    PERFORM orca.output_put(o.id, o.start, o.at, o.bytes)
    FROM unnest(p_ids, p_starts, p_at, p_bytes) AS o(id, start, at, bytes)
    JOIN orca.runs r ON r.id = o.id AND r.start = o.start AND r.state = 'running' COLLATE "C"
    WHERE o.id = ANY(p_beaten);
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
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running' COLLATE "C" AND r.machine = m.id
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
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running' COLLATE "C"
      AND orca.instance_heads(b.id, b.start)
    RETURNING r.id, r.cancel;
END
$$;

