-- orca.instance_role_make(text,text), made by migration 4.
CREATE OR REPLACE FUNCTION orca.instance_role_make(p_role text, p_verifier text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM orca.login_role_make(p_role, p_verifier, 'orca_instance');
END
$$;
REVOKE ALL ON FUNCTION orca.instance_role_make(text,text) FROM PUBLIC;
