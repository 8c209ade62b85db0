-- Instance logins of this stack ($1: their name prefix) that no live
-- instance row holds.
SELECT rolname FROM pg_roles
WHERE starts_with(rolname, $1)
  AND NOT EXISTS (SELECT 1 FROM orca.instances i WHERE i.login = rolname AND i.ended_at IS NULL)
ORDER BY rolname
