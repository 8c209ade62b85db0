-- orca.machine_role_drop(text), made by migration 3.
-- Drops a revoked login role with whatever it owns (a large object it
-- made, say). DROP OWNED needs the role's privileges, which a CREATEROLE
-- role that is not a superuser gets by granting the role to itself first.
-- False if it can't be dropped now (a session still ending): tried again
-- on a later pass.
CREATE OR REPLACE FUNCTION orca.machine_role_drop(p_role text)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        PERFORM orca.machine_role_revoke(p_role);
        IF NOT pg_has_role(current_user, p_role, 'USAGE') THEN
            EXECUTE format('GRANT %I TO %I', p_role, current_user);
        END IF;
        EXECUTE format('DROP OWNED BY %I', p_role);
        EXECUTE format('DROP ROLE %I', p_role);
    END IF;
    RETURN true;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'role % can''t be dropped now: %', p_role, SQLERRM;
    RETURN false;
END
$$;
REVOKE ALL ON FUNCTION orca.machine_role_drop(text) FROM PUBLIC;
