-- Attempt ($1, $2), stopped with this machine's worker: queued again. $3: why;
-- $4: output.
SELECT orca.worker_requeue($1, $2, $3, $4)
