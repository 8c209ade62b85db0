-- Migration 14: a worker's round in fewer statements (issue 14's claims a
-- second).
--
-- Most of a round's cost is not its reads but its statements: each one
-- that touches orca.runs opens the table and its indexes, and an UPDATE of
-- it also its constraints and trigger (executor start-up was a fifth of a
-- round's instructions). Migration 13's round that ends a run and claims
-- the next made five statements beyond the two UPDATEs of orca.runs that
-- it needs; they are folded into others here, with the same results:
--
-- * orca.finish_attempt read the attempt's pipeline spec (its retries,
--   retry delay, alert) and then updated the attempt: the UPDATE now joins
--   orca.pipelines and reads the spec itself.
-- * orca.worker_round scanned its machine's running attempts for ones no
--   longer beaten (to queue them again), and the claim then counted them
--   again for the machine's room: one scan now does both.
-- * The claim probed a pipeline for a run queued and due, then took its
--   claim lock: in a round (whose machine's row is locked already) the
--   probe is the lock's one-time condition, so that with nothing queued
--   no lock is taken, as before. (orca.worker_claim, which locks the
--   machine's row only once it knows there is a run to claim, keeps the
--   probe on its own.)
-- * The claim counted a pipeline's running attempts for max_runs, then
--   picked its runs: the count is now part of the pick's limit.
-- * orca.worker_round called orca.check_beat for the bound of its beat's
--   arrays: the bound is now checked in the round.
-- * orca.bounded_why and orca.bounded_output were plpgsql functions with
--   their own search_path: each call set it and set it back (a round
--   calls each once an end). They are now SQL expressions the planner
--   inlines where they are used, every name in them schema-qualified, so
--   that they need no search_path of their own.
-- * orca.output_fold (the trigger of every end) set its search_path and
--   plan_cache_mode, and set them back, on each call: its names and
--   operators are now schema-qualified instead, and its two statements are
--   lookups by key, planned alike either way.
--
-- Measured as migration 13 was (bench/pools.rs's claims database, one
-- session under valgrind, a round that ends a run and claims the next):
-- 2.08 M instructions a round before, 1.94 M after (7 % fewer). The rest
-- is the two UPDATEs of orca.runs and their events, the machine's row and
-- the claim lock, and what plpgsql costs a call.

-- orca.bounded_why(text) changed here: its body is in sql/functions/bounded_why.sql.

-- orca.bounded_output(bytea) changed here: its body is in sql/functions/bounded_output.sql.

-- As migration 10's, but with no settings of its own (see above).
-- orca.output_fold() changed here: its body is in sql/functions/output_fold.sql.

-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint) changed here: its body is in sql/functions/finish_attempt.sql.

-- Claims up to p_room queued runs of machine m's pool for it, as
-- migration 13's orca.claim_runs. With p_running (a round's: its machine's
-- row locked, its running attempts counted under that lock), the machine's
-- room is counted from it; without (orca.worker_claim's), the machine's
-- row is locked before the first claim and its attempts counted then.
-- orca.claim_runs(orca.pool_machines,integer,integer) made here: its body is in sql/functions/claim_runs.sql.

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

-- As migration 13's, in fewer statements (above).
-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]) changed here: its body is in sql/functions/worker_round.sql.

-- (Migration 13's orca.claim_runs(m, room, boolean) stays, unused: a round
-- of migration 13's under way as this migration commits still calls it.
-- A later migration drops it.)
