-- Migration 20: ENDED is when the attempt's process ended, by the
-- supervisor's clock (issue 27 §2).
--
-- runs.ended_at (and so orca.attempts.ended_at, which migration 19's
-- trigger copies from it) was the database's now() when the end was
-- written: a tick or a worker's round after the process ended, and a whole
-- outage later for an end kept while Postgres was away, while the duration
-- in its why ("after 0.3s") is the supervisor's measurement. Now the
-- supervisor, which keeps the moment it saw each process end (its
-- monotonic clock), sends with each end how many seconds ago that was, and
-- ended_at is now() less that: the database's clock stays the reference
-- (no host's clock is compared with it), and STARTED..ENDED agrees with the
-- measured duration.
--
-- The "ago" comes from a supervisor, which for a pool is a machine login:
-- orca.ended_when keeps ended_at within [started_at, now()] whatever it
-- sends (negative, NULL, NaN, infinite or huge: NULL or not positive is
-- now(), anything else at most back to the attempt's start). An end with no
-- process measured (the sweep of a stale run, a lost machine, a cancel of a
-- queued run, an old binary's end) is still now().
--
-- New functions, each with one argument more than the one it follows (an
-- argument can't be added in place): orca.finish_attempt (10 arguments),
-- orca.finish_attempts (10), orca.worker_round (17), orca.worker_finish
-- (9), orca.instance_head_finish (9). The old ones stay as they are, for
-- an older scheduler or worker still running during a deploy; the new ones
-- have the same bodies but for ended_at (and the ago arrays' length
-- checked with the others), the same EXECUTE grants and the same settings
-- as the old ones, but orca.finish_attempt's: the scheduler now calls it
-- itself, in place of the 8-argument wrapper that set search_path and
-- plan_cache_mode for it, so it sets them itself, as migration 14's did.
-- (No 9-argument orca.finish_attempt with the ago in place of the
-- machine: migration 10's 8-argument wrapper passes an untyped NULL as
-- the 9th, which would then resolve to the float8 one, not the machine.)

-- When an attempt that started at p_started ended, its process having
-- ended p_ago seconds ago by its supervisor's clock: now() less p_ago,
-- within [p_started, now()]; now() for no ago (NULL, zero, negative). (A
-- plain SQL expression, inlined where it is used; every operator named
-- with its schema, so a caller's search_path can't stand in for one.)
-- orca.ended_when(timestamp with time zone,double precision) made here: its body is in sql/functions/ended_when.sql.

-- As migration 14's (9 arguments), with p_ago. Its settings as migration
-- 14 had them: it is called by a statement of the scheduler's
-- (sql/run_finish.sql), not only by orca's functions.
-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb,bigint,double precision) made here: its body is in sql/functions/finish_attempt.sql.

-- As migration 15's, with p_agos (one an end, as each other array).
-- orca.finish_attempts(bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],bigint,double precision[]) made here: its body is in sql/functions/finish_attempts.sql.

-- As migration 17's, with p_end_agos (one an end, as each other end's array).
-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[],double precision[]) made here: its body is in sql/functions/worker_round.sql.

-- As migration 10's orca.worker_finish, with p_ago.
-- orca.worker_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision) made here: its body is in sql/functions/worker_finish.sql.

-- As migration 4's orca.instance_head_finish, with p_ago.
-- orca.instance_head_finish(bigint,integer,text,integer,integer,text,bytea,jsonb,double precision) made here: its body is in sql/functions/instance_head_finish.sql.

-- Who may call them: as the functions they follow (migrations 4, 10, 13).
