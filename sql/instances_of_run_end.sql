-- Ends the live instance rows of run $1 at start $2 with why $3; the
-- instances (name, provider, provider id, region, login) to delete.
WITH ended AS (
    UPDATE orca.instances SET state = 'ended', ended_at = now(), why = $3
    WHERE run = $1 AND start = $2 AND ended_at IS NULL
    RETURNING instance, provider, provider_id, region, login, run
), e AS (
    INSERT INTO orca.events (run, kind, why)
    SELECT run, 'instance ended', format('%s: %s', instance, $3::text) FROM ended
)
SELECT instance, provider, provider_id, region, login FROM ended
