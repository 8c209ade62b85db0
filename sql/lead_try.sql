SELECT pg_try_advisory_lock($1) AS held
