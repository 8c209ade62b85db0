-- The instances with a live row (what the provider may keep).
SELECT DISTINCT instance FROM orca.instances WHERE ended_at IS NULL
