-- Ends the sessions of machine and instance logins (direct members of
-- orca_worker or orca_instance) in this database that have been in one
-- transaction for over $1 seconds by the server's clock: such a login can't
-- hold a row lock orca needs for longer, whatever timeouts it SET for
-- itself. Returns who they were and for how long.
SELECT a.pid, r.rolname::text, extract(epoch FROM now() - a.xact_start)::float8,
       pg_terminate_backend(a.pid)
FROM pg_stat_activity a
JOIN pg_roles r ON r.oid = a.usesysid
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.xact_start < now() - make_interval(secs => $1)
  AND EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
              WHERE m.member = a.usesysid AND g.rolname IN ('orca_worker', 'orca_instance'))
