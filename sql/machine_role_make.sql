-- Makes machine role $1 with SCRAM verifier $2 (a member of orca_worker).
SELECT orca.machine_role_make($1, $2)
