-- Ends the session of this scheduler's wake-up listener ($1: its backend
-- pid), stalled reading a flood of notifications (src/scheduler/wake.rs).
SELECT pg_terminate_backend($1)
