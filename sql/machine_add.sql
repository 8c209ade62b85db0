-- A machine the provider made: $1 id, $2 pool, $3 name, $4 type, $5 location,
-- $6 arch, $7 role, $8 provider id, $9 slots, $10 region (ec2). Booting until
-- its worker is seen.
WITH m AS (
    INSERT INTO orca.pool_machines (id, pool, name, type, location, arch, role, provider_id, slots, region)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    RETURNING name, pool, type, location
)
INSERT INTO orca.events (kind, why)
SELECT 'machine made', format('%s of pool %s (type %s in %s)', name, pool, type, location) FROM m
