-- Migration 13: a claim takes a pool's pipelines in turn (issue 14's
-- claims a second).
--
-- orca.worker_claim looked at every pipeline of its pool's oldest queued
-- run (two index probes a pipeline) on every claim, to take the pipeline
-- with the oldest first: with 8 pipelines, a fifth of a claim's and its
-- end's work (bench/pools.rs's database under valgrind, one session: 2.38 M
-- instructions for a claim and its end before, 1.96 M after). It now takes
-- them in turn, by when each last took its turn (orca.claim_locks.
-- claimed_at, set under the pipeline's claim lock) and takes from the
-- first with a run queued and due; one with nothing queued costs a probe
-- and takes no turn (an idle claim writes nothing). Within a pipeline the order is as
-- before (oldest first within max_runs, then fill runs). A pipeline queued
-- behind another's backlog now waits for its turn, not for the backlog.
--
-- A worker's round (orca.worker_round) also carries the ends of its
-- attempts that ended since the last (its 16-argument form; the 8-argument
-- one, an older binary's, is the same round without ends): an end and the
-- claim of the run after it are one round trip and one transaction, not
-- two, and the round locks and marks its machine's row once, where the
-- beat and the claim each looked the machine up, and marked or locked its
-- row, on their own (the same measure: 2.02 M for a round that ends a run
-- and claims the next, the worker's whole path).

ALTER TABLE orca.claim_locks ADD COLUMN claimed_at timestamptz;

-- Claims up to p_room queued runs of machine m's pool for it (a claim of
-- orca.worker_claim's or orca.worker_round's). With p_lock, the machine's
-- row is locked before the first claim; without, its caller holds that
-- lock. It does not mark the machine busy: its callers do.
CREATE FUNCTION orca.claim_runs(m orca.pool_machines, p_room integer, p_lock boolean)
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
            WHERE pm.id = m.id AND pm.ending IS NULL FOR NO KEY UPDATE;
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

CREATE OR REPLACE FUNCTION orca.worker_claim(p_room integer)
RETURNS TABLE (id bigint, start integer, pipeline text, args text[], spec jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    m orca.pool_machines := orca.worker_machine();
    n integer;
BEGIN
    RETURN QUERY SELECT c.id, c.start, c.pipeline, c.args, c.spec
    FROM orca.claim_runs(m, p_room, true) c;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE orca.pool_machines SET busy_at = now(), seen_at = clock_timestamp()
        WHERE pool_machines.id = m.id;
    END IF;
END
$$;

-- A worker's round trip, in one transaction: the ends of its attempts that
-- ended (p_end_*, as orca.worker_finish each: their slots are free for this
-- round's claim), its machine marked seen (busy if it ran anything), its
-- attempts beaten (p_ids, p_starts, p_pids, as orca.worker_beat) and their
-- new output appended (p_out_*, as orca.outputs_put), and with p_room > 0
-- up to that many runs claimed (as orca.worker_claim). Its machine's row is
-- locked once, for the round. A row for each end (kind 'ended': id, start,
-- the run's state now or NULL if the attempt was no longer running here),
-- each attempt beaten ('beaten': id, cancel) and each run claimed
-- ('claimed': id, start, pipeline, args, spec).
CREATE FUNCTION orca.worker_round(p_ids bigint[], p_starts integer[], p_pids integer[],
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
    m orca.pool_machines;
    ends integer := coalesce(cardinality(p_end_ids), 0);
    beaten bigint[];
    cancels boolean[];
    n integer;
BEGIN
    IF ends > 1024 THEN
        RAISE EXCEPTION 'a round ends at most 1024 attempts' USING ERRCODE = '54000';
    END IF;
    IF coalesce(cardinality(p_end_starts), 0) <> ends OR coalesce(cardinality(p_end_states), 0) <> ends
       OR coalesce(cardinality(p_end_codes), 0) <> ends OR coalesce(cardinality(p_end_signals), 0) <> ends
       OR coalesce(cardinality(p_end_whys), 0) <> ends OR coalesce(cardinality(p_end_outputs), 0) <> ends
       OR coalesce(cardinality(p_end_bodies), 0) <> ends THEN
        RAISE EXCEPTION 'the ends'' arrays differ in length' USING ERRCODE = '22023';
    END IF;
    PERFORM orca.check_beat(p_ids, p_starts, p_pids);
    UPDATE orca.pool_machines pm SET seen_at = clock_timestamp(),
        busy_at = CASE WHEN ends > 0 OR coalesce(cardinality(p_ids), 0) > 0 THEN now() ELSE pm.busy_at END
    WHERE pm.role = session_user AND pm.ended_at IS NULL
    RETURNING pm.* INTO m;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live machine logs in as this role' USING ERRCODE = 'OR001';
    END IF;
    FOR i IN 1..ends LOOP
        kind := 'ended';
        id := p_end_ids[i];
        start := p_end_starts[i];
        cancel := NULL;
        state := orca.finish_attempt(p_end_ids[i], p_end_starts[i], p_end_states[i], p_end_codes[i],
            p_end_signals[i], p_end_whys[i], p_end_outputs[i], p_end_bodies[i], m.id);
        pipeline := NULL;
        args := NULL;
        spec := NULL;
        RETURN NEXT;
    END LOOP;
    PERFORM orca.requeue_attempt(x.id, x.start,
        format('the worker on machine %s was not running it', m.name), x.output)
    FROM orca.runs x
    WHERE x.machine = m.id AND x.state = 'running' COLLATE "C" AND NOT (x.id = ANY(p_ids))
      AND x.heartbeat < now() - interval '15 seconds';
    IF coalesce(cardinality(p_ids), 0) > 0 THEN
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
    IF p_room > 0 AND m.ending IS NULL THEN
        RETURN QUERY SELECT 'claimed', c.id, c.start, false, 'running', c.pipeline, c.args, c.spec
        FROM orca.claim_runs(m, p_room, false) c;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 AND ends = 0 AND coalesce(cardinality(p_ids), 0) = 0 THEN
            UPDATE orca.pool_machines SET busy_at = now() WHERE pool_machines.id = m.id;
        END IF;
    END IF;
END
$$;

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

REVOKE ALL ON FUNCTION orca.claim_runs(orca.pool_machines, integer, boolean),
    orca.worker_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[], integer,
        bigint[], integer[], text[], integer[], integer[], text[], bytea[], jsonb[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    orca.worker_round(bigint[], integer[], integer[], bigint[], integer[], bigint[], bytea[], integer,
        bigint[], integer[], text[], integer[], integer[], text[], bytea[], jsonb[])
    TO orca_worker;
