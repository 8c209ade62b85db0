-- Migration 13: a claim takes a pool's pipelines in turn (issue 14's
-- claims a second).
--
-- orca.worker_claim looked at every pipeline of its pool's oldest queued
-- run (two index probes a pipeline) on every claim, to take the pipeline
-- with the oldest first: with 8 pipelines, over a third of a claim's work
-- (bench/pools.rs; instructions counted under valgrind, 2.25 M for a claim
-- and its end before, 1.53 M after). It now takes them in turn, by when
-- each last took its turn (orca.claim_locks.claimed_at, set under the
-- pipeline's claim lock): the first with a run queued and due is looked
-- at, and for one run that is all. Within a pipeline the order is as
-- before (oldest first within max_runs, then fill runs). A pipeline queued
-- behind another's backlog now waits for its turn, not for the backlog.

ALTER TABLE orca.claim_locks ADD COLUMN claimed_at timestamptz;

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
        -- claim takes of it.
        UPDATE orca.claim_locks l SET claimed_at = now()
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
    IF taken > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp() WHERE pool_machines.id = m.id;
    END IF;
END
$$;
