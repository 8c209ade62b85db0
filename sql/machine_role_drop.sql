-- Drops revoked machine role $1 and what it owns; false if it can't be now.
SELECT orca.machine_role_drop($1)
