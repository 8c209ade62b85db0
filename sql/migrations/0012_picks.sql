-- Migration 12: a pick of queued runs reads only runs of its kind (issue
-- 14's fleet on one Postgres), the same behaviour.
--
-- A claim picks a pipeline's queued runs within max_runs (not fill), then
-- its fill runs; a tick's pick of local runs does the same. Both read
-- runs_queued_order (pipeline, queued_at, id) and skipped the other kind
-- as they went: with a backfill of 100,000 fill runs queued and none
-- other, every claim read all their index entries to find none within
-- max_runs (4,500 buffers a claim: tests/it/plans.rs). The pick of fill
-- runs could do the same through a queue of 100,000 without fill runs,
-- whenever the planner chose that index over runs_queued_fill (stale
-- statistics, where the two cost the same: CI saw it, 2,400 a claim).
-- And a tick's pick read every queued fill run of every local pipeline
-- to keep the 64 oldest (3,750 buffers a tick with 100,000 queued).
--
-- * runs_queued_order is now (pipeline, fill, queued_at, id): each kind's
--   queued runs in the order they are taken, so a pick reads the entries
--   it takes and no other; runs_queued_fill, which it serves, goes.
-- * orca.worker_claim's look at a pipeline's oldest queued run takes the
--   older of each kind's oldest (the index has no one order over both).
-- * sql/startable.sql picks each local pipeline's fill runs as its other
--   runs, oldest first, at most a tick's starts of each.

DROP INDEX orca.runs_queued_order;
DROP INDEX orca.runs_queued_fill;
CREATE INDEX runs_queued_order ON orca.runs (pipeline, fill, queued_at, id) WHERE state = 'queued';

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
            SELECT o.queued_at, o.id FROM (
                (SELECT r.queued_at, r.id FROM orca.runs r
                 WHERE r.pipeline = p.name AND r.state = 'queued' AND NOT r.fill
                   AND r.not_before <= now()
                 ORDER BY r.queued_at, r.id LIMIT 1)
                UNION ALL
                (SELECT r.queued_at, r.id FROM orca.runs r
                 WHERE r.pipeline = p.name AND r.state = 'queued' AND r.fill
                   AND r.not_before <= now()
                 ORDER BY r.queued_at, r.id LIMIT 1)
            ) o
            ORDER BY o.queued_at, o.id LIMIT 1
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
