-- Ends the sessions of machine and instance logins (direct members of
-- orca_worker or orca_instance, not WITH ADMIN OPTION: Postgres 16 grants
-- orca's role each group back that way when it makes it; never orca's own
-- role) in this database that hold
-- what orca can't let them hold: one transaction open for over $1 seconds
-- by the server's clock (a row lock orca needs), or any advisory lock (they
-- need none; a session taking thousands fills the server's shared lock
-- table, and every session of every database then fails). Whatever
-- timeouts such a login SET for itself. Returns who, and why in words.
SELECT a.pid, r.rolname::text AS role,
       CASE WHEN EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')
            THEN 'held advisory locks'
            ELSE format('stayed in one transaction for %ss (over %ss)',
                        round(extract(epoch FROM now() - a.xact_start)), $1::float8) END AS what,
       pg_terminate_backend(a.pid) AS ended
FROM pg_stat_activity a
JOIN pg_roles r ON r.oid = a.usesysid
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND NOT r.rolsuper
  AND (a.xact_start < now() - make_interval(secs => $1)
       OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'))
  AND r.rolname <> current_user
  AND EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
              WHERE m.member = a.usesysid AND NOT m.admin_option
                AND g.rolname IN ('orca_worker', 'orca_instance'))
