-- What an EC2 run's instances know of their cluster (issue 11): the head's
-- own address and its workers', so the driver of a distributed engine, as
-- well as the services, can reach the whole cluster. An instance login may
-- read them for a run it serves, and nothing else.

-- `ec2-serve`: the addresses of run (p_run, p_start)'s instances, for
-- instance p_instance of this login serving it: the head's address (the
-- head's own for the head; for a worker, the one the scheduler gave it,
-- as `pool-next` prints it; '-' if none is known), the live workers' own in
-- the order they were given to the run ('-' for one not known), and whether
-- the run is over at that start (no more will come). No row when this
-- login has no live row in the run.
-- orca.instance_cluster(text,bigint,integer) made here: its body is in sql/functions/instance_cluster.sql.

