-- Takes this session's reserve: $1 advisory locks of its own (keys with
-- 'orca' in their high half and this backend's pid in their low one, so
-- two schedulers' never collide), each an entry of the server's shared
-- lock table kept for the moment that table is full: released
-- (sql/flood_release.sql) just before sql/flood_end.sql, whose catalogs
-- then find room. Fails ("out of shared memory") while the table is full.
-- How many this session holds now.
SELECT count(*) FILTER (WHERE pg_catalog.pg_try_advisory_lock(
           (1869767521::bigint << 32) | (pg_catalog.pg_backend_pid()::bigint << 8) | g))::integer
       AS held
FROM generate_series(0, $1::integer - 1) g
