-- Ends backend $1 (a stale session of this very process, or of a dead one on
-- this host, that still holds the lead lock); waits up to 2 s for it to go.
SELECT pg_terminate_backend($1, 2000) AS ended
