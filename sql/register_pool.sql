-- Upserts one pool from orca.toml ($1 name, $2 spec). A changed spec starts
-- its type walk again from the first type; a retired pool put back starts
-- afresh (no status, no demand, its walk from the first type).
INSERT INTO orca.pools AS p (name, spec, retired)
VALUES ($1, $2, false)
ON CONFLICT (name) DO UPDATE SET
    spec = excluded.spec,
    retired = false,
    walk_type = CASE WHEN p.spec = excluded.spec AND NOT p.retired THEN p.walk_type ELSE 0 END,
    walk_since = CASE WHEN p.spec = excluded.spec AND NOT p.retired THEN p.walk_since ELSE NULL END,
    status = CASE WHEN p.retired THEN '' ELSE p.status END,
    status_at = CASE WHEN p.retired THEN now() ELSE p.status_at END,
    demand = CASE WHEN p.retired THEN 0 ELSE p.demand END,
    registered = now()
