-- `pool-wait`: whether run $2 at start $3 is over for instance $1.
SELECT orca.instance_run_over($1, $2, $3) AS over
