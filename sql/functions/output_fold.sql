-- orca.output_fold(), made by migration 8.
-- As migration 15's, the trigger's WHEN a single column: it is parsed and
-- set up by every UPDATE of a run's state or start (claims and ends), and
-- the state is checked in the function instead, which runs only for an
-- attempt with chunks.
CREATE OR REPLACE FUNCTION orca.output_fold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state OPERATOR(pg_catalog.=) 'running'::pg_catalog.text
       AND (NEW.state OPERATOR(pg_catalog.<>) 'running'::pg_catalog.text
            OR NEW.start OPERATOR(pg_catalog.<>) OLD.start) THEN
        IF EXISTS (SELECT 1 FROM orca.output_chunks c
                   WHERE c.run OPERATOR(pg_catalog.=) OLD.id
                     AND c.start OPERATOR(pg_catalog.=) OLD.start) THEN
            -- (runs.output is never NULL: = is IS NOT DISTINCT FROM here,
            -- whose operator can't be named.)
            IF NEW.output OPERATOR(pg_catalog.=) OLD.output THEN
                NEW.output := orca.output_tail(OLD.id, OLD.start, OLD.output);
            END IF;
            DELETE FROM orca.output_chunks c
            WHERE c.run OPERATOR(pg_catalog.=) OLD.id AND c.start OPERATOR(pg_catalog.=) OLD.start;
        END IF;
        NEW.chunked := false;
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION orca.output_fold() FROM PUBLIC;
