-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb), made by migration 3.
CREATE OR REPLACE FUNCTION orca.finish_attempt(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body, NULL);
END
$$;
ALTER FUNCTION orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
REVOKE ALL ON FUNCTION orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb) FROM PUBLIC;

-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint), made by migration 10.
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
ALTER FUNCTION orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb, bigint)
    RESET ALL;
REVOKE ALL ON FUNCTION orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint) FROM PUBLIC;

-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint,double precision), made by migration 20.
-- As migration 14's (9 arguments), with p_ago. Its settings as migration
-- 14 had them: it is called by a statement of the scheduler's
-- (sql/run_finish.sql), not only by orca's functions.
CREATE OR REPLACE FUNCTION orca.finish_attempt(
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
REVOKE ALL ON FUNCTION orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint,double precision) FROM PUBLIC;
