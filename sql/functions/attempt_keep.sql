-- orca.attempt_keep(), made by migration 19.
-- The attempt that stopped running, kept (and the one 100 before it
-- deleted). (As orca.output_fold: no settings of its own, every operator and
-- function named with its schema, so a caller's search_path can't stand
-- in for them; its callers are orca's role and orca's own SECURITY
-- DEFINER functions.)
CREATE OR REPLACE FUNCTION orca.attempt_keep() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orca.attempts (run, attempt, started_at, ended_at, outcome,
                               exit_code, exit_signal, why, output)
    VALUES (OLD.id, OLD.start, OLD.started_at, coalesce(NEW.ended_at, pg_catalog.now()),
            CASE WHEN NEW.state OPERATOR(pg_catalog.<>) 'queued'::pg_catalog.text THEN NEW.state
                 -- Queued again: a failure that is retried counts one more
                 -- failure; a stop, a lost machine or head, a sweep don't.
                 WHEN NEW.failures OPERATOR(pg_catalog.>) OLD.failures THEN 'failed'
                 ELSE 'requeued' END,
            NEW.exit_code, NEW.exit_signal, NEW.why, NEW.output)
    ON CONFLICT (run, attempt) DO NOTHING;
    IF OLD.start OPERATOR(pg_catalog.>) 100 THEN
        DELETE FROM orca.attempts a
        WHERE a.run OPERATOR(pg_catalog.=) OLD.id
          AND a.attempt OPERATOR(pg_catalog.=) (OLD.start OPERATOR(pg_catalog.-) 100);
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION orca.attempt_keep() FROM PUBLIC;
