-- This session's backend pid (the fence other sessions check the lead by).
SELECT pg_backend_pid() AS pid
