-- Migration 17: fill runs have a bound (issue 26 §4.6). A pipeline's
-- `max_fills` (its spec's, 10 for a spec stored before the field existed:
-- config::spec::DEFAULT_MAX_FILLS) caps its fill runs running at once, as
-- `max_runs` caps the others; those beyond it wait. `sql/startable.sql`
-- holds it for local and ec2 runs; here a worker's claims do: migration
-- 15's orca.claim_runs and migration 16's orca.worker_round as they were,
-- but for the fill runs' pick's LIMIT. Same signatures, replaced in place
-- (their grants kept): a worker of an older binary calls them as before,
-- so the floor stays where it was.

-- orca.claim_runs(orca.pool_machines,integer,integer) changed here: its body is in sql/functions/claim_runs.sql.

-- orca.worker_round(bigint[],integer[],integer[],bigint[],integer[],bigint[],bytea[],integer,bigint[],integer[],text[],integer[],integer[],text[],bytea[],jsonb[]) changed here: its body is in sql/functions/worker_round.sql.
