#!/bin/sh
# An EC2 run's instance: serves its run, then, with a warm pool, waits to be
# handed the next and serves that, until it is shut down. The same for every
# provider (the local provider runs it as a process group; on EC2 it is the
# user-data, with the settings below exported before it).
#
#   ORCA_INSTANCE          this instance's id in orca.instances
#   ORCA_RUN, ORCA_START   the run (and its start) it serves first
#   ORCA_TOKEN             the instance's own credentials (ROLE:SECRET)
#   ORCA_DATABASE_URL      where the database is (no user or password in it)
#   ORCA_EC2_POOL_SECONDS  how long to stay warm after a run (0: shut down)
#   ORCA_BIN               the orca binary (default: orca on PATH)
#   ORCA_SHUTDOWN          how to shut the instance down (default: shutdown -h now)
bin=${ORCA_BIN:-orca}
# (Run after scripts/machine-prelude.sh: the token file, ORCA_RUN_AS, the
# metadata block.)
run=$ORCA_RUN
start=$ORCA_START
while :; do
  "$bin" ec2-serve "$ORCA_INSTANCE" "$run" "$start"
  [ "${ORCA_EC2_POOL_SECONDS:-0}" != 0 ] || break
  # next <run> <start> <head address> <0|1>; exit 1: no next run.
  next=$("$bin" pool-next "$ORCA_INSTANCE" "$run" "$start" "$ORCA_EC2_POOL_SECONDS") || break
  set -- $next
  run=$2
  start=$3
done
echo "orca instance: $ORCA_INSTANCE is done: shutting down" >&2
${ORCA_SHUTDOWN:-shutdown -h now}
