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

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

-- orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb) changed here: its body is in sql/functions/worker_finish.sql.
