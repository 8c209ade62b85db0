-- Hands an idle instance of pipeline $1's kind (its [ec2] table: instances
-- of the same kind serve any pipeline that has it), polled within $7
-- seconds, to run $2 at
-- start $3 as its $4 (head address $5; $6: may take new code): its idle row
-- ended and a `pooled` one for the run, in one statement. The instance and
-- its own address, if one was idle.
WITH pick AS (
    SELECT id FROM orca.instances
    WHERE kind = (SELECT md5(coalesce(spec -> 'ec2', 'null'::jsonb)::text)
                  FROM orca.pipelines WHERE name = $1)
      AND state = 'idle' AND ended_at IS NULL
      AND polled > clock_timestamp() - make_interval(secs => $7)
    ORDER BY idle_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), ended AS (
    UPDATE orca.instances i SET state = 'ended', ended_at = now(),
        why = format('handed to run %s', $2::bigint)
    FROM pick WHERE i.id = pick.id
    RETURNING i.instance, i.kind, i.login, i.host, i.provider, i.provider_id, i.region
), added AS (
    INSERT INTO orca.instances (instance, kind, run, start, role, login, address, host,
                                provider, provider_id, region, state, fresh_code)
    SELECT instance, kind, $2, $3, $4, login, $5, host, provider, provider_id, region, 'pooled', $6
    FROM ended
    RETURNING instance, host
)
SELECT instance, coalesce(host, '') AS host FROM added
