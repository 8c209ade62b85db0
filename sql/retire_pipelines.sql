-- Pipelines no longer in orca.toml: they start and fire nothing; history stays.
WITH r AS (
    UPDATE orca.pipelines SET retired = true, next_fire = NULL
    WHERE NOT retired AND NOT (name = ANY($1))
    RETURNING name
), e AS (
    INSERT INTO orca.events (pipeline, kind, why)
    SELECT name, 'retired', 'no longer in orca.toml' FROM r
)
SELECT name FROM r ORDER BY name
