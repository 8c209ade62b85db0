-- `ec2-serve`: the head's address and the workers' (in the order they were
-- given to the run) of run $2 at start $3, which instance $1 serves, and
-- whether the run is over. No row: it serves it no longer.
SELECT head, workers, over FROM orca.instance_cluster($1, $2, $3)
