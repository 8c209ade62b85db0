-- `pool-next`: instance $1's row for run $2 at start $3 is idle now.
SELECT orca.instance_idle($1, $2, $3) AS found
