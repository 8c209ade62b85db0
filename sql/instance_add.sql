-- A new instance made for a run: $1 one JSON object (warm_pool::leader's
-- NewInstance), its fields by name: instance (its name), pipeline (its kind
-- is that pipeline's [ec2] table), run and start (the attempt), role, login,
-- address (the head's), host (its own address), provider, provider_id,
-- region, fresh_code (may take new code), market ('on-demand' or 'spot').
WITH n AS (
    SELECT * FROM jsonb_to_record($1::jsonb) AS n(
        instance text, pipeline text, run bigint, start integer, role text, login text,
        address text, host text, provider text, provider_id text, region text,
        fresh_code boolean, market text)
), i AS (
    INSERT INTO orca.instances (instance, kind, run, start, role, login, address, host,
                                provider, provider_id, region, state, fresh_code, market)
    SELECT n.instance,
           (SELECT md5(coalesce(spec -> 'ec2', 'null'::jsonb)::text)
            FROM orca.pipelines WHERE name = n.pipeline),
           n.run, n.start, n.role, n.login, n.address, n.host, n.provider, n.provider_id,
           n.region, 'starting', n.fresh_code, n.market
    FROM n
    RETURNING instance, run, role, market
)
INSERT INTO orca.events (run, kind, why)
SELECT run, 'instance made', format('%s as its %s (%s)', instance, role, market) FROM i
