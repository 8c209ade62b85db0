-- Makes instance role $1 with SCRAM verifier $2 (a member of orca_instance).
SELECT orca.instance_role_make($1, $2)
