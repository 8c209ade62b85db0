-- Migration 12: a pick of queued runs reads only runs of its kind, and
-- each partial index of orca.runs serves only the lookups it was made for,
-- whatever the statistics say (issue 14's fleet on one Postgres); the same
-- behaviour.
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
--
-- A partial index whose statistics were taken while it was nearly empty
-- (no run running at the last ANALYZE or VACUUM: a quiet night) looks
-- empty to the planner until the next, however many entries it has since:
-- a scan of it whole then costs nothing, and any lookup whose condition
-- implies its predicate may take that scan. runs_running (pipeline),
-- runs_machine_running (machine) and runs_instance_running (instance) all
-- said only state = 'running', so a machine's count of its running runs
-- could read every running run through runs_running (1,200 entries a claim
-- with 1,200 running: tests/it/plans.rs), a lookup by key the same, and a
-- sensor's look for its queued run every queued run of its pipeline.
--
-- * The lookups by pipeline (the picks and counts of a pipeline's queued
--   and running runs) say state = '...' and are served by
--   runs_queued_order and runs_running. Every other lookup compares state
--   COLLATE "C" (migration 11 began it: the same test, as a state is an
--   ASCII word), which implies neither of those predicates.
-- * runs_machine_running (machine) says state = 'running' COLLATE "C" AND
--   machine IS NOT NULL: implied by a machine's lookups alone (machine =
--   ... implies machine IS NOT NULL), as runs_sensor_queued (pipeline) says
--   state = 'queued' COLLATE "C" AND origin = 'sensor' for a sensor's.
-- * runs_instance_running goes: no lookup uses it, and each index is one
--   more to write on every UPDATE of orca.runs.
-- * Restated with state compared COLLATE "C": orca.worker_beat,
--   worker_hello, worker_output, worker_requeue, requeue_attempt,
--   instance_run_over, instance_cluster and instance_head_output here;
--   orca.worker_claim's count of its machine's runs below;
--   sql/machine_end.sql, machine_ending.sql, pool_machines_live.sql and
--   sensor_queue.sql.

-- The new indexes are built first, under names of their own (a build
-- holds off writes of orca.runs, not reads), and the old ones dropped and
-- the new renamed last: a drop holds off reads too, until the migration
-- commits, so it comes after the builds.
CREATE INDEX runs_queued_order_12 ON orca.runs (pipeline, fill, queued_at, id)
    WHERE state = 'queued';
CREATE INDEX runs_machine_running_12 ON orca.runs (machine)
    WHERE state = 'running' COLLATE "C" AND machine IS NOT NULL;
CREATE INDEX runs_sensor_queued_12 ON orca.runs (pipeline)
    WHERE state = 'queued' COLLATE "C" AND origin = 'sensor';
DROP INDEX orca.runs_queued_order, orca.runs_queued_fill, orca.runs_instance_running,
    orca.runs_machine_running, orca.runs_sensor_queued;
ALTER INDEX orca.runs_queued_order_12 RENAME TO runs_queued_order;
ALTER INDEX orca.runs_machine_running_12 RENAME TO runs_machine_running;
ALTER INDEX orca.runs_sensor_queued_12 RENAME TO runs_sensor_queued;

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
                                               WHERE r.machine = m.id AND r.state = 'running' COLLATE "C"));
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
    WHERE x.machine = m.id AND x.state = 'running' COLLATE "C" AND NOT (x.id = ANY(p_ids))
      AND x.heartbeat < now() - interval '15 seconds';
    RETURN QUERY
    UPDATE orca.runs r SET heartbeat = clock_timestamp(), pid = b.pid
    FROM unnest(p_ids, p_starts, p_pids) AS b(id, start, pid)
    WHERE r.id = b.id AND r.start = b.start AND r.state = 'running' COLLATE "C" AND r.machine = m.id
    RETURNING r.id, r.cancel;
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_hello(OUT pool text, OUT name text, OUT slots integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
    r record;
BEGIN
    UPDATE orca.pool_machines SET seen_at = clock_timestamp() WHERE id = m.id;
    -- A worker starting runs nothing yet: runs still running on this machine
    -- were its previous worker's, whose processes died with it.
    FOR r IN SELECT x.id, x.start FROM orca.runs x WHERE x.machine = m.id AND x.state = 'running' COLLATE "C" LOOP
        PERFORM orca.requeue_attempt(r.id, r.start,
            format('the worker on machine %s started again', m.name), ''::bytea);
    END LOOP;
    pool := m.pool;
    name := m.name;
    slots := m.slots;
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_output(p_id bigint, p_start integer, p_output bytea)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    UPDATE orca.runs SET output = substring(p_output FROM greatest(octet_length(p_output) - 65535, 1))
    WHERE id = p_id AND start = p_start AND state = 'running' COLLATE "C" AND machine = m.id;
END
$$;

CREATE OR REPLACE FUNCTION orca.worker_requeue(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    PERFORM 1 FROM orca.runs
    WHERE id = p_id AND start = p_start AND machine = m.id AND state = 'running' COLLATE "C" FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN orca.requeue_attempt(p_id, p_start, p_why, p_output);
END
$$;

CREATE OR REPLACE FUNCTION orca.requeue_attempt(p_id bigint, p_start integer, p_why text, p_output bytea)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    p_why := orca.bounded_why(p_why);
    p_output := orca.bounded_output(p_output);
    UPDATE orca.runs SET state = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END,
        heartbeat = NULL, ended_at = now(), why = p_why, output = p_output
    WHERE id = p_id AND start = p_start AND state = 'running' COLLATE "C"
    RETURNING id, pipeline, state INTO r;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO orca.events (run, pipeline, kind, why)
    VALUES (r.id, r.pipeline, CASE WHEN r.state = 'cancelled' THEN 'cancelled' ELSE 'requeued' END, p_why);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION orca.instance_run_over(p_instance text, p_run bigint, p_start integer)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM orca.instances i
                   WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
                     AND i.login = session_user AND i.ended_at IS NULL) THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM orca.runs r
                       WHERE r.id = p_run AND r.start = p_start AND r.state = 'running' COLLATE "C");
END
$$;

CREATE OR REPLACE FUNCTION orca.instance_cluster(p_instance text, p_run bigint, p_start integer)
RETURNS TABLE (head text, workers text[], over boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    me orca.instances;
BEGIN
    SELECT * INTO me FROM orca.instances i
    WHERE i.instance = p_instance AND i.run = p_run AND i.start = p_start
      AND i.login = session_user AND i.ended_at IS NULL
    ORDER BY i.id DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT coalesce(nullif(CASE WHEN me.role = 'head' THEN me.host ELSE me.address END, ''), '-'),
           coalesce((SELECT array_agg(coalesce(nullif(w.host, ''), '-') ORDER BY w.id)
                     FROM orca.instances w
                     WHERE w.run = p_run AND w.start = p_start AND w.role = 'worker'
                       AND w.ended_at IS NULL), '{}'::text[]),
           NOT EXISTS (SELECT 1 FROM orca.runs r WHERE r.id = p_run AND r.start = p_start
                       AND r.state = 'running' COLLATE "C");
END
$$;

CREATE OR REPLACE FUNCTION orca.instance_head_output(p_id bigint, p_start integer, p_output bytea)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE orca.runs SET output = substring(p_output FROM greatest(octet_length(p_output) - 65535, 1))
    WHERE id = p_id AND start = p_start AND state = 'running' COLLATE "C" AND orca.instance_heads(p_id, p_start);
END
$$;
