-- orca.machine_role_make(text,text), made by migration 3.
CREATE OR REPLACE FUNCTION orca.machine_role_make(p_role text, p_verifier text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM orca.login_role_make(p_role, p_verifier, 'orca_worker');
END
$$;
REVOKE ALL ON FUNCTION orca.machine_role_make(text,text) FROM PUBLIC;
