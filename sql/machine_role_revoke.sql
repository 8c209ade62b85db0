-- Revokes machine role $1: no more logins, its sessions ended (not dropped yet).
SELECT orca.machine_role_revoke($1)
