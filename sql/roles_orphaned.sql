-- Machine roles of this stack ($1: their name prefix) that no live machine
-- row holds: made for a machine whose row was never written.
SELECT rolname FROM pg_roles
WHERE starts_with(rolname, $1)
  AND NOT EXISTS (SELECT 1 FROM orca.pool_machines m WHERE m.role = rolname AND m.ended_at IS NULL)
ORDER BY rolname
