-- Tries the migration lock $1 for this transaction; false if another
-- session holds it (another `orca migrate`, or an intruder: see
-- lock_intruders_end.sql).
SELECT pg_try_advisory_xact_lock($1)
