-- Pools no longer in orca.toml ($1: the names it has): their machines are
-- removed once idle, and none is made.
WITH r AS (
    UPDATE orca.pools SET retired = true
    WHERE NOT retired AND NOT (name = ANY($1))
    RETURNING name
), e AS (
    INSERT INTO orca.events (kind, why)
    SELECT 'pool retired', format('pool %s is no longer in orca.toml', name) FROM r
)
SELECT name FROM r ORDER BY name
