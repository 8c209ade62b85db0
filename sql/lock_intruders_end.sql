-- Ends the sessions that hold advisory lock $1 (a bigint key, in this
-- database) and are not orca processes of the right kind: another role than
-- orca's own, or an application_name that doesn't start with $2 ('orca
-- scheduler', 'orca migrate'). A machine or instance login can take any
-- advisory key; holding one of orca's must not stop a scheduler or a
-- migration. A superuser's session can't be ended by orca's role (ended:
-- false). Returns who they were.
SELECT a.pid, coalesce(a.usename::text, '?') AS role, coalesce(a.application_name, '') AS app,
       coalesce(host(a.client_addr), 'a local socket') AS from_addr,
       CASE WHEN r.rolsuper AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
            THEN false ELSE pg_terminate_backend(a.pid, 2000) END AS ended
FROM pg_locks l
JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_roles r ON r.oid = a.usesysid
WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid AND l.objsubid = 1
  AND (a.usename IS DISTINCT FROM current_user
       OR NOT starts_with(coalesce(a.application_name, ''), $2::text))
