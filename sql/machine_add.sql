-- A machine the provider made: $1 one JSON object (pools' NewMachine), its
-- fields by name: id, pool, name, type, location, arch, role, provider_id,
-- slots, region (ec2), market ('on-demand' or 'spot'). Booting until its
-- worker is seen.
WITH n AS (
    SELECT * FROM jsonb_to_record($1::jsonb) AS n(
        id bigint, pool text, name text, type text, location text, arch text, role text,
        provider_id text, slots integer, region text, market text)
), m AS (
    INSERT INTO orca.pool_machines (id, pool, name, type, location, arch, role, provider_id, slots, region, market)
    SELECT id, pool, name, type, location, arch, role, provider_id, slots, region, market FROM n
    RETURNING name, pool, type, location, market
)
INSERT INTO orca.events (kind, why)
SELECT 'machine made', format('%s of pool %s (type %s, %s, in %s)', name, pool, type, market, location) FROM m
