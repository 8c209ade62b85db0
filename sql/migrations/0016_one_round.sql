-- Migration 16: a worker's round sets up less (issue 14's claims a
-- second).
--
-- A cached plan keeps the plan, not its executor state: each execution of
-- a statement sets up every node and expression in it anew, and a plpgsql
-- expression (an IF, an assignment) is set up once a transaction, so once
-- a round. That set-up, not the rows read or written, was most of a round
-- (ExecutorStart alone 28 %), and folding the same work into fewer
-- statements does not shrink it (the whole round as two statements: 1.97 M
-- instructions against 1.90 M). What a round sets up on its common path
-- is cut instead:
--
-- * orca.worker_round calls no function of orca's on its common path. It
--   ends its attempts itself, as orca.finish_attempt does
--   (tests/it/worker.rs has the three ways of ending agree case by case),
--   and an end that succeeded or was cancelled, most of them, is a
--   statement that reads no pipeline and sets no retry; a failure's retry
--   event and alert are statements of their own, made only when it has
--   them. It takes its first turn itself too, without orca.claim_runs's
--   cursor: a turn is one UPDATE of orca.claim_locks, whose pick is the
--   pool's pipelines sorted in a
--   subquery with the probe and the claim lock as conditions above it and
--   LIMIT 1 (a condition with a subquery is never pushed below the sort,
--   so those after the first that passes are not probed), and the claim of
--   its runs a second statement, whose snapshot is taken after the lock,
--   as before. (The lock is one CASE with the probe: the planner orders a
--   filter's conditions by their cost, and a claim lock must not be taken
--   on a pipeline with nothing due.) Room left after that turn (a machine
--   with several slots, a turn at its max_runs) is claimed as before, by
--   orca.claim_runs's loop over the other pipelines in turn (a turn
--   statement for each, each sorting the pool again, cost seconds a round
--   with a few hundred pipelines at max_runs). The picks need no
--   sort: non-fill runs, then fill runs, is the order their Append returns
--   them in; the claimed rows come in no set order (the worker starts
--   each).
-- * The machine's running attempts are counted with those silent for 15 s
--   that it does not beat, which are read again only when there are some;
--   each end's state is checked as the loop reads it (one IN, not a scan
--   of the array first). An end names its machine's attempt in a
--   condition the machine's index can't serve (IS NOT DISTINCT FROM), so
--   that it is read by its id, not among all its machine's running ones.
-- * orca.runs' state CHECK was parsed again by every UPDATE (its array
--   constant read byte by byte): it is now a cast to the enum
--   orca.run_state, a tiny expression (a bad state is refused with 22P02
--   instead of 23514; NOT VALID: every row passed the check it replaces).
--   The fold trigger's WHEN is a single column; its function checks the
--   state.
-- * A round updates its turn's row of orca.claim_locks and its machine's
--   row: with the default fillfactor a page fills with a few hundred dead
--   versions before it is pruned, and every seq scan and lookup steps over
--   them. fillfactor 10 (orca.claim_locks, a row a pipeline) and 50
--   (orca.pool_machines) have a page pruned as it is read once a tenth
--   (half) of it is used.
--
-- orca.worker_claim (older binaries') keeps orca.claim_runs, whose idle
-- claim takes no lock: a round always locks its machine's row, to mark it
-- seen.
--
-- Measured as migration 15 was (bench/pools.rs's claims database, one
-- session under valgrind, a round that ends a run and claims the next):
-- 1.90 M instructions a round before, 1.50 M after (21 % fewer).

CREATE TYPE orca.run_state AS ENUM ('queued', 'running', 'succeeded', 'failed', 'cancelled');
ALTER TABLE orca.runs DROP CONSTRAINT runs_state_check,
    ADD CONSTRAINT runs_state_check CHECK (state::orca.run_state IS NOT NULL) NOT VALID;

ALTER TABLE orca.claim_locks SET (fillfactor = 10);
ALTER TABLE orca.pool_machines SET (fillfactor = 50);

-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]) changed here: its body is in sql/functions/worker_round.sql.

-- As migration 15's, the trigger's WHEN a single column: it is parsed and
-- set up by every UPDATE of a run's state or start (claims and ends), and
-- the state is checked in the function instead, which runs only for an
-- attempt with chunks.
-- orca.output_fold() changed here: its body is in sql/functions/output_fold.sql.

DROP TRIGGER runs_output_fold ON orca.runs;
CREATE TRIGGER runs_output_fold BEFORE UPDATE OF state, start ON orca.runs FOR EACH ROW
    WHEN (OLD.chunked) EXECUTE FUNCTION orca.output_fold();
