-- The sessions of the server (any database) holding more than $1 advisory
-- locks: what fills the server's shared lock table, after which every
-- statement that needs an entry in it fails ("out of shared memory"), new
-- logins included. This statement needs none: it names no table or
-- catalog (a shared one, pg_roles or pg_database, needs an entry even to
-- be read) and calls no function that checks a role (pg_stat_activity
-- does, and may read pg_auth_members): pg_lock_status() reads the lock
-- table as it is. (sql/flood_find.sql is this with a probe for room.) One
-- row each: its backend pid and how many it holds.
SELECT l.pid, count(*) AS n
FROM pg_catalog.pg_lock_status() l
WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
GROUP BY l.pid
HAVING count(*) > $1::bigint
