-- orca.login_role_make(text,text,text), made by migration 5.
-- A machine's or instance's login role: at most 4 sessions (a worker needs
-- 2), and timeouts a careless client gets by default. A hostile one can SET
-- them back; the scheduler ends its sessions that stay in a transaction
-- (sql/logins_stuck_end.sql), and its own statements wait on no lock for
-- more than 2 s.
CREATE OR REPLACE FUNCTION orca.login_role_make(p_role text, p_verifier text, p_group text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_group NOT IN ('orca_worker', 'orca_instance') THEN
        RAISE EXCEPTION 'not a login group: %', p_group;
    END IF;
    EXECUTE format('CREATE ROLE %I LOGIN CONNECTION LIMIT 4 PASSWORD %L IN ROLE %I',
                   p_role, p_verifier, p_group);
    -- orca's role a member of it: it sees the login's sessions in
    -- pg_stat_activity (to end one stuck in a transaction) and may drop
    -- what it owns.
    EXECUTE format('GRANT %I TO %I', p_role, current_user);
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', p_role, '10s');
    EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', p_role, '5s');
    EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', p_role, '5s');
END
$$;
REVOKE ALL ON FUNCTION orca.login_role_make(text,text,text) FROM PUBLIC;
