-- The sessions of the server (any database) holding more than $1 advisory
-- locks, once this statement has found room in the server's shared lock
-- table: it first takes one transaction-level advisory lock of this
-- session's own (freed as it ends), which needs an entry, so it fails
-- with SQLSTATE 53200 while the table is full, whoever filled it (many
-- sessions holding a few each, say); then sql/flood_holders.sql, which
-- needs no entry, says who holds what. One row each: its backend pid and
-- how many it holds.
WITH probe AS MATERIALIZED (
    SELECT pg_catalog.pg_try_advisory_xact_lock(
               (1869767521::bigint << 32) | (pg_catalog.pg_backend_pid()::bigint << 8) | 255) AS took
)
SELECT l.pid, count(*) AS n
FROM probe, pg_catalog.pg_lock_status() l
WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
GROUP BY l.pid
HAVING count(*) > $1::bigint
