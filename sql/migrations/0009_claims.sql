-- Migration 9: cheaper claims and ends for pool machines (issue 14's
-- claims a second), the same behaviour:
-- * orca.worker_claim takes no lock and writes nothing when nothing of its
--   pool is queued (what an idle machine's every round asks); the runs it claims are taken by one UPDATE a pipeline (the
--   pipeline's claim lock already keeps other claimers off them; the
--   UPDATE's own check skips one a cancel took meanwhile) instead of a row
--   lock and an UPDATE each.
-- * orca.worker_finish checks that the attempt is its machine's without
--   locking its row: orca.finish_attempt's UPDATE checks (id, start,
--   running) again, and an attempt's (id, start) is never another's.

CREATE OR REPLACE FUNCTION orca.worker_claim(p_room integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
    c record;
    taken integer := 0;
    busy integer;
    got bigint[];
    claimed bigint[] := '{}';
    locked boolean := false;
BEGIN
    IF p_room <= 0 THEN
        RETURN;
    END IF;
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
        -- Within max_runs, then fill runs on top.
        FOR f IN 0..1 LOOP
            WITH pick AS (
                SELECT r.id FROM orca.runs r
                WHERE r.pipeline = c.name AND r.state = 'queued' AND r.fill = (f = 1)
                  AND r.not_before <= now()
                ORDER BY r.queued_at, r.id
                LIMIT CASE WHEN f = 0 THEN greatest(least(c.max_runs - busy, p_room - taken), 0)
                           ELSE greatest(p_room - taken, 0) END
            ), u AS (
                UPDATE orca.runs r SET state = 'running', start = r.start + 1, started_at = now(),
                    ended_at = NULL, heartbeat = now(), host = m.name, pid = NULL, instance = NULL,
                    machine = m.id, cancel = false, exit_code = NULL, exit_signal = NULL, why = NULL,
                    output = ''::bytea
                FROM pick WHERE r.id = pick.id AND r.state = 'queued'
                RETURNING r.id
            )
            SELECT coalesce(array_agg(u.id), '{}') INTO got FROM u;
            claimed := claimed || got;
            taken := taken + cardinality(got);
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

CREATE OR REPLACE FUNCTION orca.worker_finish(
    p_id bigint, p_start integer, p_state text, p_code integer, p_signal integer,
    p_why text, p_output bytea, p_body jsonb
) RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    IF p_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'bad state %', p_state;
    END IF;
    PERFORM 1 FROM orca.runs
    WHERE id = p_id AND start = p_start AND machine = m.id AND state = 'running';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- (busy_at needs no write here: the worker's beats keep it fresh while
    -- the run runs.)
    RETURN orca.finish_attempt(p_id, p_start, p_state, p_code, p_signal, p_why, p_output, p_body);
END
$$;
