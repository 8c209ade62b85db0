-- Migration 15: an end that streamed nothing costs no fold, and the
-- functions a round calls have no settings of their own (issue 14's claims
-- a second).
--
-- * The fold trigger (orca.output_fold: an attempt's chunks folded into
--   runs.output and deleted as it stops running) was called by every end
--   (every UPDATE of a running run's state or start), and looked for
--   chunks each time. Most attempts end before their first append.
--   runs.chunked now says the attempt has chunks: orca.output_put sets it
--   with the attempt's first chunk (under the row lock its beat took), the
--   fold clears it, and the trigger fires only WHEN it is set, so the end
--   of an attempt that streamed nothing calls no function. Running
--   attempts that have chunks as this migration commits are marked here,
--   under the lock ADD COLUMN takes: every transaction that wrote chunks
--   (each beat updates its runs first) has ended by then, and the marking
--   sees what they committed (orca migrate runs at READ COMMITTED).
-- * orca.finish_attempt (9 arguments) and orca.claim_runs (3 arguments)
--   set their search_path and plan_cache_mode, and set them back, on each
--   call, about a statement's cost each. Their only callers, orca's own
--   functions, all set search_path = pg_catalog, pg_temp already; those
--   that did not set plan_cache_mode = force_generic_plan now do, so the
--   two run as before under their callers' settings. (EXECUTE on them is
--   orca's role's alone: nothing else calls them.)
--
-- Measured as migration 14 was (bench/pools.rs's claims database, one
-- session under valgrind, a round that ends a run and claims the next):
-- 1.90 M instructions a round before, 1.78 M after (6 % fewer).
--
-- (Migration 13's orca.claim_runs(m, room, boolean) stays: a database that
-- gets 14 and this one in one transaction still has migration 13's rounds
-- under way as it commits.)

ALTER TABLE orca.runs ADD COLUMN chunked boolean NOT NULL DEFAULT false;
UPDATE orca.runs r SET chunked = true
WHERE r.state = 'running' COLLATE "C"
  AND EXISTS (SELECT 1 FROM orca.output_chunks c WHERE c.run = r.id AND c.start = r.start);

-- As migration 14's, clearing runs.chunked as it folds.
CREATE OR REPLACE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state OPERATOR(pg_catalog.<>) 'running'::pg_catalog.text
       OR NEW.start OPERATOR(pg_catalog.<>) OLD.start THEN
        IF EXISTS (SELECT 1 FROM orca.output_chunks c
                   WHERE c.run OPERATOR(pg_catalog.=) OLD.id
                     AND c.start OPERATOR(pg_catalog.=) OLD.start) THEN
            -- (runs.output is never NULL: = is IS NOT DISTINCT FROM here,
            -- whose operator can't be named.)
            IF NEW.output OPERATOR(pg_catalog.=) OLD.output THEN
                NEW.output := orca.output_tail(OLD.id, OLD.start, OLD.output);
            END IF;
            DELETE FROM orca.output_chunks c
            WHERE c.run OPERATOR(pg_catalog.=) OLD.id AND c.start OPERATOR(pg_catalog.=) OLD.start;
        END IF;
        NEW.chunked := false;
    END IF;
    RETURN NEW;
END
$$;
ALTER FUNCTION orca.output_fold() RESET ALL;

DROP TRIGGER runs_output_fold ON orca.runs;
CREATE TRIGGER runs_output_fold BEFORE UPDATE OF state, start ON orca.runs FOR EACH ROW
    WHEN (OLD.chunked AND OLD.state = 'running') EXECUTE FUNCTION orca.output_fold();

-- As migration 8's, marking the attempt chunked with its first chunk.
CREATE OR REPLACE FUNCTION orca.output_put(p_id bigint, p_start integer, p_at bigint, p_bytes bytea)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_upto bigint;
    v_stored bigint;
BEGIN
    IF p_at IS NULL OR p_at < 0 OR coalesce(octet_length(p_bytes), 0) = 0 THEN
        RETURN;
    END IF;
    v_upto := p_at + octet_length(p_bytes);
    IF octet_length(p_bytes) > 65536 THEN
        p_bytes := orca.bounded_output(p_bytes);
        p_at := v_upto - 65536;
    END IF;
    SELECT max(c.upto) INTO v_stored FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start;
    IF v_stored >= v_upto THEN
        RETURN;
    ELSIF v_stored > p_at THEN
        p_bytes := substring(p_bytes FROM (v_stored - p_at + 1)::integer);
        p_at := v_stored;
    END IF;
    INSERT INTO orca.output_chunks (run, start, at, upto, bytes)
    VALUES (p_id, p_start, p_at, v_upto, p_bytes);
    DELETE FROM orca.output_chunks c
    WHERE c.run = p_id AND c.start = p_start AND c.upto <= v_upto - 65536;
    -- Its first chunk (a chunk stays until the fold: the one just stored
    -- ends past the cut): its end folds them (the trigger's WHEN).
    IF v_stored IS NULL THEN
        UPDATE orca.runs r SET chunked = true
        WHERE r.id = p_id AND r.start = p_start AND NOT r.chunked;
    END IF;
END
$$;

ALTER FUNCTION orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb, bigint)
    RESET ALL;
ALTER FUNCTION orca.claim_runs(orca.pool_machines, integer, integer) RESET ALL;
ALTER FUNCTION orca.finish_attempt(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION orca.worker_finish(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION orca.instance_head_finish(bigint, integer, text, integer, integer, text, bytea, jsonb)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION orca.worker_claim(integer) SET plan_cache_mode = force_generic_plan;
