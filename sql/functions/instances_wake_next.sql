-- orca.instances_wake_next(), made by migration 27: trigger
-- instances_wake_next's. An instance handed a run (its `pooled` row added,
-- sql/instance_hand_over.sql): a NOTIFY on its channel, which its
-- `pool-next` waits on.
CREATE OR REPLACE FUNCTION orca.instances_wake_next() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify(orca.wake_channel('instance', NEW.instance), '');
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.instances_wake_next() FROM PUBLIC;
