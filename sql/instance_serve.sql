-- `ec2-serve`: instance $1's role in run $2 at start $3, the head's address,
-- whether it may take new code, the pipeline's spec and the run's args.
SELECT role, address, fresh_code, spec, args FROM orca.instance_serve($1, $2, $3)
