-- Attempt ($1, $2), stopped with its head: queued again. $3: why; $4: output.
SELECT orca.instance_head_requeue($1, $2, $3, $4)
