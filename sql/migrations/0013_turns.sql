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
-- orca.claim_runs(orca.pool_machines,integer,boolean) made here: its body is in sql/functions/claim_runs.sql.

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

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
-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]) made here: its body is in sql/functions/worker_round.sql.

-- A binary of migration 12 or before: its round, now the same round
-- without ends.
-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer) changed here: its body is in sql/functions/worker_round.sql.

