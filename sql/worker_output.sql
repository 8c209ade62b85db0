-- The output tail $3 of attempt ($1, $2) this machine runs.
SELECT orca.worker_output($1, $2, $3)
