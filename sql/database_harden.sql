-- Run by every `orca migrate`: what orca's role (the database's owner) can
-- revoke from PUBLIC on its own database, so machine and instance logins
-- can make no temporary tables or functions in pg_temp. The rest needs a
-- superuser (docs/security.md).
DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
END
$$
