-- Shuts out the login of live machine $1 (orca.machine_role_revoke: no
-- more logins, its sessions ended), so that a row its login keeps locked
-- can be taken. With $2 (a backend pid), only while that session holds the
-- lead lock $3 (as sql/machine_ending.sql's fence). Its role, if shut out.
-- (A CTE with a volatile function is run whole, whatever reads it.)
WITH shut AS (
    SELECT m.role, orca.machine_role_revoke(m.role)
    FROM orca.pool_machines m
    WHERE m.id = $1 AND m.ended_at IS NULL
      AND ($2::integer IS NULL OR EXISTS (
          SELECT 1 FROM pg_locks l
          WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $2
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND l.classid = ($3::bigint >> 32)::oid AND l.objid = ($3::bigint & 4294967295)::oid
            AND l.objsubid = 1))
)
SELECT role::text FROM shut
