-- A new instance made for run $3 at start $4: $1 its name, $2 its pipeline
-- (its kind is that pipeline's [ec2] table), $5 role,
-- $6 login, $7 head address, $8 its own address, $9 provider, $10 provider
-- id, $11 region, $12 may take new code.
WITH i AS (
    INSERT INTO orca.instances (instance, kind, run, start, role, login, address, host,
                                provider, provider_id, region, state, fresh_code)
    VALUES ($1, (SELECT md5(coalesce(spec -> 'ec2', 'null'::jsonb)::text)
                 FROM orca.pipelines WHERE name = $2),
            $3, $4, $5, $6, $7, $8, $9, $10, $11, 'starting', $12)
    RETURNING instance, run, role
)
INSERT INTO orca.events (run, kind, why)
SELECT run, 'instance made', format('%s as its %s', instance, role) FROM i
