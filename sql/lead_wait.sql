-- Waits for LEAD_LOCK ($1) on this session, for as long as this
-- transaction's lock_timeout (set just before) allows: a session lock, kept
-- once the transaction commits.
SELECT pg_advisory_lock($1)
