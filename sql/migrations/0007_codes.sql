-- orca's own SQLSTATEs (class OR, which no standard class uses; see
-- ARCHITECTURE.md, "Errors"), so that a caller decides by a code, never by
-- a message's text.
--
-- OR001: the login's role has no live machine row. `orca worker` waits
-- (the machine was just made and its row is on its way) or, for long,
-- gives up (it is being removed). Until now this was 42501 (insufficient
-- privilege), which a caller could not tell apart from a privilege
-- refused; the message stays the same for binaries that read it.

CREATE OR REPLACE FUNCTION orca.worker_machine() RETURNS orca.pool_machines
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines;
BEGIN
    SELECT * INTO m FROM orca.pool_machines WHERE role = session_user AND ended_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live machine logs in as this role' USING ERRCODE = 'OR001';
    END IF;
    RETURN m;
END
$$;
