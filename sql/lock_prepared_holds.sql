-- Whether a prepared transaction (no session: pid NULL) holds advisory
-- lock $1 (a bigint key) in this database: lock_intruders_end.sql can't
-- end it; it must be rolled back (logins_prepared.sql).
SELECT EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.pid IS NULL
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid
      AND l.objsubid = 1)
