-- orca.claim_lock_add(), made by migration 5.
CREATE OR REPLACE FUNCTION orca.claim_lock_add() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO orca.claim_locks (pipeline) VALUES (NEW.name) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.claim_lock_add() FROM PUBLIC;
