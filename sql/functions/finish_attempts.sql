-- orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint), made by migration 10.
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
REVOKE ALL ON FUNCTION orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint) FROM PUBLIC;

-- orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint,double precision[]), made by migration 20.
-- As migration 15's, with p_agos (one an end, as each other array).
CREATE OR REPLACE FUNCTION orca.finish_attempts(
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
REVOKE ALL ON FUNCTION orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint,double precision[]) FROM PUBLIC;
