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

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

-- orca.worker_beat(bigint[],integer[],integer[]) changed here: its body is in sql/functions/worker_beat.sql.

-- orca.worker_hello() changed here: its body is in sql/functions/worker_hello.sql.

-- orca.worker_output(bigint,integer,bytea) changed here: its body is in sql/functions/worker_output.sql.

-- orca.worker_requeue(bigint,integer,text,bytea) changed here: its body is in sql/functions/worker_requeue.sql.

-- orca.requeue_attempt(bigint,integer,text,bytea) changed here: its body is in sql/functions/requeue_attempt.sql.

-- orca.instance_run_over(text,bigint,integer) changed here: its body is in sql/functions/instance_run_over.sql.

-- orca.instance_cluster(text,bigint,integer) changed here: its body is in sql/functions/instance_cluster.sql.

-- orca.instance_head_output(bigint,integer,bytea) changed here: its body is in sql/functions/instance_head_output.sql.
