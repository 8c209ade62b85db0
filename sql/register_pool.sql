-- Upserts one pool from orca.toml ($1 name, $2 spec). A changed spec starts
-- its type walk again from the first type.
INSERT INTO orca.pools AS p (name, spec, retired)
VALUES ($1, $2, false)
ON CONFLICT (name) DO UPDATE SET
    spec = excluded.spec,
    retired = false,
    walk_type = CASE WHEN p.spec = excluded.spec THEN p.walk_type ELSE 0 END,
    walk_since = CASE WHEN p.spec = excluded.spec THEN p.walk_since ELSE NULL END,
    registered = now()
