-- orca.login_rotate(text), made by migration 5.
-- A machine's or instance's first login replaces the secret it booted with
-- (which sits in user-data, readable by any process on the machine): the
-- login sets its own role's password to SCRAM verifier p_verifier. Only for
-- the machine and instance logins orca makes; never a plain password.
CREATE OR REPLACE FUNCTION orca.login_rotate(p_verifier text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_auth_members m
                   JOIN pg_roles g ON g.oid = m.roleid
                   JOIN pg_roles r ON r.oid = m.member
                   WHERE r.rolname = session_user AND g.rolname IN ('orca_worker', 'orca_instance')) THEN
        RAISE EXCEPTION 'only a machine or instance login rotates its secret' USING ERRCODE = '42501';
    END IF;
    IF p_verifier !~ '^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$'
       OR length(p_verifier) > 512 THEN
        RAISE EXCEPTION 'not a SCRAM-SHA-256 verifier' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('ALTER ROLE %I PASSWORD %L', session_user, p_verifier);
END
$$;
REVOKE ALL ON FUNCTION orca.login_rotate(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.login_rotate(text) TO orca_worker, orca_instance;
