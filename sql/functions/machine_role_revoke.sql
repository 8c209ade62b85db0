-- orca.machine_role_revoke(text), made by migration 3.
-- Revokes a machine's credentials: no more logins, its sessions ended. Safe
-- to repeat. (Committed before the role is dropped, so a role that can't be
-- dropped yet is still shut out.)
CREATE OR REPLACE FUNCTION orca.machine_role_revoke(p_role text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        EXECUTE format('ALTER ROLE %I NOLOGIN CONNECTION LIMIT 0', p_role);
        PERFORM pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = p_role;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION orca.machine_role_revoke(text) FROM PUBLIC;
