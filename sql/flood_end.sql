-- Ends the sessions of backend pids $1 that are machine or instance logins
-- (direct members of orca_worker or orca_instance, not WITH ADMIN OPTION:
-- Postgres 16 grants orca's role each group back that way when it makes
-- it; never orca's own role nor a superuser), in whatever database of the
-- server, and every other session of those logins; with $2 (the table
-- was found full), if any of them is a login, every session of every
-- login: sql/flood_find.sql found each holding more advisory locks than
-- any login needs (they need none), and another session asking for locks
-- without pause (of the same login, or of another acting with it, holding
-- none yet) would take the table back the moment the first let go, before
-- the guard's reserve is taken again or the login revoked. (Workers whose
-- sessions go reconnect; their statements were failing anyway.)
-- Waits up to 2 s for each to end, so that the locks it held are free when
-- this returns. Run with the lock table full: right after
-- sql/flood_release.sql, which leaves room for the catalogs named here.
-- One row for each session ended (or tried): who it was.
WITH logins AS MATERIALIZED (
    SELECT DISTINCT a.usesysid
    FROM unnest($1::integer[]) p(pid)
    CROSS JOIN LATERAL pg_catalog.pg_stat_get_activity(p.pid) a
    JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
    WHERE NOT r.rolsuper AND r.rolname <> current_user
      AND EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
                  WHERE m.member = a.usesysid AND NOT m.admin_option
                    AND g.rolname IN ('orca_worker', 'orca_instance'))
)
SELECT a.pid, r.rolname::text AS role, coalesce(d.datname::text, '?') AS db,
       coalesce(a.application_name, '') AS app,
       coalesce(host(a.client_addr), 'a local socket') AS from_addr,
       pg_catalog.pg_terminate_backend(a.pid, 2000) AS ended
FROM pg_catalog.pg_stat_get_activity(NULL) a
JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
LEFT JOIN pg_catalog.pg_database d ON d.oid = a.datid
WHERE a.pid <> pg_catalog.pg_backend_pid()
  AND (a.usesysid IN (SELECT usesysid FROM logins)
       OR ($2::boolean AND EXISTS (SELECT 1 FROM logins)
           AND NOT r.rolsuper AND r.rolname <> current_user
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
                       WHERE m.member = a.usesysid AND NOT m.admin_option
                         AND g.rolname IN ('orca_worker', 'orca_instance'))))
