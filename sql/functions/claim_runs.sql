-- orca.claim_runs(orca.pool_machines,integer,boolean), made by migration 13.
-- Claims up to p_room queued runs of machine m's pool for it (a claim of
-- orca.worker_claim's or orca.worker_round's). With p_lock, the machine's
-- row is locked before the first claim; without, its caller holds that
-- lock. It does not mark the machine busy: its callers do.
CREATE OR REPLACE FUNCTION orca.claim_runs(m orca.pool_machines, p_room integer, p_lock boolean)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    c record;
    taken integer := 0;
    busy integer;
    n integer;
    locked boolean := NOT p_lock;
    roomed boolean := false;
BEGIN
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
        -- Nothing of it queued and due: no lock, nothing written. (In the
        -- order of runs_queued_order, so that it is read from its start: an
        -- EXISTS would leave the planner free to read the table until it
        -- meets one, which it does after ANALYZE.)
        PERFORM 1 FROM orca.runs r
        WHERE r.pipeline = c.name AND r.state = 'queued' AND r.not_before <= now()
        ORDER BY r.fill, r.queued_at, r.id LIMIT 1;
        CONTINUE WHEN NOT FOUND;
        -- The machine's row, locked before the first claim: a removal marks
        -- it ending under the same lock, so a claim and a removal never
        -- cross, and two claims of one machine count its room one after the
        -- other. (Nothing queued: no lock, nothing written.)
        IF NOT locked THEN
            PERFORM 1 FROM orca.pool_machines pm
            WHERE pm.id = m.id AND pm.ending IS NULL AND pm.notice IS NULL FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            locked := true;
        END IF;
        IF NOT roomed THEN
            roomed := true;
            p_room := least(p_room, m.slots - (SELECT count(*) FROM orca.runs r
                                               WHERE r.machine = m.id AND r.state = 'running' COLLATE "C"));
            EXIT WHEN p_room <= 0;
        END IF;
        -- Another worker claiming this pipeline's runs right now: leave it
        -- to that one (this worker tries again on its next round).
        -- Otherwise its lock is taken and so is its turn, whatever this
        -- claim takes of it.
        UPDATE orca.claim_locks l SET claimed_at = clock_timestamp()
        WHERE l.pipeline = (SELECT k.pipeline FROM orca.claim_locks k WHERE k.pipeline = c.name
                            FOR UPDATE SKIP LOCKED);
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
END
$$;
REVOKE ALL ON FUNCTION orca.claim_runs(orca.pool_machines,integer,boolean) FROM PUBLIC;

-- orca.claim_runs(orca.pool_machines,integer,integer), made by migration 14.
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
            WHERE pm.id = m.id AND pm.ending IS NULL AND pm.notice IS NULL FOR NO KEY UPDATE;
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
                     LIMIT greatest(least(coalesce((c.spec ->> 'max_fills')::integer, 10)
                                          - (SELECT count(*) FROM orca.runs b
                                             WHERE b.pipeline = c.name
                                               AND b.state = 'running' AND b.fill),
                                          p_room - taken), 0))
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
REVOKE ALL ON FUNCTION orca.claim_runs(orca.pool_machines,integer,integer) FROM PUBLIC;
