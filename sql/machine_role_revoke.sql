-- Revokes machine role $1: no more logins, its sessions ended, dropped.
SELECT orca.machine_role_revoke($1)
