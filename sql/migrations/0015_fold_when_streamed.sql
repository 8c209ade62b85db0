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
-- * A claim went through the pool's pipelines in turn, one statement or
--   two each, until one had a run due: a pipeline with nothing queued
--   takes no turn, so it stays ahead, and each claim paid for every idle
--   one ahead of the first with work (forty idle pipelines in a pool: 49
--   statements a claim). The loop's own query now leaves out the
--   pipelines with nothing due (a probe each, in that one query, fetched
--   a row at a time so that none after the first with work is probed):
--   9 statements. A round's claim lock no longer probes again: the loop
--   found a run due (one another worker claimed since, a few milliseconds
--   ago at most, costs a turn and a claim of nothing); orca.worker_claim's,
--   which waits for its machine's row lock first, probes again after it.
-- * orca.finish_attempts (a supervisor's ends) refuses arrays of
--   different lengths, as orca.worker_round does, instead of padding the
--   shorter with NULLs.
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
-- orca.output_fold() changed here: its body is in sql/functions/output_fold.sql.

DROP TRIGGER runs_output_fold ON orca.runs;
CREATE TRIGGER runs_output_fold BEFORE UPDATE OF state, start ON orca.runs FOR EACH ROW
    WHEN (OLD.chunked AND OLD.state = 'running') EXECUTE FUNCTION orca.output_fold();

-- As migration 8's, marking the attempt chunked with its first chunk.
-- orca.output_put(bigint,integer,bigint,bytea) changed here: its body is in sql/functions/output_put.sql.

-- As migration 11's, refusing arrays of different lengths, as
-- orca.worker_round does.
-- orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint) changed here: its body is in sql/functions/finish_attempts.sql.

-- As migration 14's, with only the pool's pipelines that have a run due
-- in its loop.
-- orca.claim_runs(orca.pool_machines,integer,integer) changed here: its body is in sql/functions/claim_runs.sql.

