-- The output tail $3 of attempt ($1, $2) the head runs.
SELECT orca.instance_head_output($1, $2, $3)
