-- Migration 11: a claim, a beat and an end look their runs up by key
-- whatever the table's statistics say (issue 14's fleet on one Postgres),
-- the same behaviour.
--
-- orca.runs has partial indexes on state = 'queued' (runs_queued_order,
-- runs_queued_fill, runs_sensor_queued) and on state = 'running'
-- (runs_running, runs_machine_running, runs_instance_running). A lookup by
-- id that also says state = 'queued' (or 'running') may read one of them
-- whole instead of the primary key, and the planner chooses that when the
-- statistics say few runs wait (or run): after a burst queued since the
-- last ANALYZE, every claim read the index entries of every queued run
-- (about 1,850 buffers a claim with 100,000 queued, against 50:
-- tests/it/plans.rs), and a plan so chosen is kept for the session.
--
-- Here each such lookup compares state under COLLATE "C": the same test
-- (text equality is bytewise under any deterministic collation, and a
-- state is one of five ASCII words), which the planner can't match to a
-- partial index's predicate (that compares under the column's collation),
-- so it takes the primary key. The functions are otherwise as they were:
-- orca.worker_claim's claiming UPDATE (its picks still read
-- runs_queued_order), orca.finish_attempt, orca.finish_attempts,
-- orca.runs_beat, orca.outputs_put, orca.worker_beat (its requeue of lost
-- attempts still reads runs_machine_running) and orca.instance_head_beat.
-- sql/runs_start.sql, sql/run_cancel.sql and sql/instances_to_end.sql do
-- the same.

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint) changed here: its body is in sql/functions/finish_attempt.sql.

-- orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint) changed here: its body is in sql/functions/finish_attempts.sql.

-- orca.runs_beat(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[]) changed here: its body is in sql/functions/runs_beat.sql.

-- orca.outputs_put(bigint[],bigint[],integer[],bigint[],bytea[]) changed here: its body is in sql/functions/outputs_put.sql.

-- orca.worker_beat(bigint[],integer[],integer[]) changed here: its body is in sql/functions/worker_beat.sql.

-- orca.instance_head_beat(bigint[],integer[],integer[]) changed here: its body is in sql/functions/instance_head_beat.sql.

